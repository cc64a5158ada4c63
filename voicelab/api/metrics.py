"""Prometheus metrics, named the way vLLM and TGI name theirs, in one ``CollectorRegistry`` per app.

Request figures (outcome counter, duration, time to first audio, queue time, RTF) are observed by the speech
route as each API request ends. Everything else is read when Prometheus scrapes, from the engine status and the
telemetry ring, so a scrape never waits for the worker and nothing is stored twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from voicelab.api.memory import AllocatorEvents, Telemetry, latest_allocator
from voicelab.engine.messages import SynthesisResult
from voicelab.engine.status import EngineStatus

OUTCOMES = ("ok", "invalid", "not_found", "too_large", "busy", "unavailable", "error")
SECONDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
RTF_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0)


class EngineCollector(Collector):
    """Scrape-time gauges and counters from ``status()`` and the latest telemetry sample."""

    def __init__(self, status: Callable[[], EngineStatus], telemetry: Telemetry, events: AllocatorEvents) -> None:
        self.status, self.telemetry, self.events = status, telemetry, events

    def collect(self) -> Iterator[Metric]:
        status = self.status()
        sample = self.telemetry.ring.latest()
        yield GaugeMetricFamily("voicelab_queue_depth", "Jobs waiting for the engine.", value=status.queue_length)
        running = (
            sum(len(w.in_flight_jobs) for w in status.workers) if status.workers else int(bool(status.in_flight_job))
        )
        yield GaugeMetricFamily("voicelab_requests_running", "Jobs on the device now.", value=running)
        yield GaugeMetricFamily("voicelab_engine_ready", "1 when the worker is ready.", value=int(status.ready))
        yield CounterMetricFamily(
            "voicelab_worker_restarts", "Worker processes replaced (soft restarts and crashes).", value=status.restarts
        )
        yield CounterMetricFamily("voicelab_ooms", "CUDA out-of-memory events seen.", value=self.events.totals().ooms)
        cache = status.profile_cache
        yield CounterMetricFamily(
            "voicelab_profile_cache_hits", "Speaker-profile cache hits (this worker).", value=cache.hits if cache else 0
        )
        yield CounterMetricFamily(
            "voicelab_profile_cache_misses",
            "Speaker-profile cache misses (this worker).",
            value=cache.misses if cache else 0,
        )
        yield from worker_metrics(status)
        stats = latest_allocator(status, sample)
        nvml = sample.nvml if sample is not None else None
        memory = {
            "used": nvml.used if nvml is not None else None,
            "total": nvml.total if nvml is not None else None,
            "allocated": stats.allocated if stats is not None else None,
            "reserved": stats.reserved if stats is not None else None,
        }
        for name, value in memory.items():
            if value is not None:
                yield GaugeMetricFamily(f"voicelab_gpu_memory_{name}_bytes", f"GPU memory {name}.", value=value)
        if stats is not None:
            yield GaugeMetricFamily(
                "voicelab_allocator_fragmentation_ratio",
                "PyTorch allocator non-releasable / cached-free memory.",
                value=stats.fragmentation,
            )


def worker_metrics(status: EngineStatus) -> Iterator[Metric]:
    """One sample per worker (``device`` label, as the panel's tabs name them): up, running, restarts, memory."""
    families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
        "up": GaugeMetricFamily("voicelab_worker_up", "1 when this device's worker is ready.", labels=["device"]),
        "running": GaugeMetricFamily("voicelab_worker_jobs_running", "Jobs on this device now.", labels=["device"]),
        "restarts": CounterMetricFamily(
            "voicelab_device_worker_restarts", "Worker processes replaced on this device.", labels=["device"]
        ),
        "allocated": GaugeMetricFamily(
            "voicelab_worker_allocated_bytes", "PyTorch allocated on this device.", labels=["device"]
        ),
        "reserved": GaugeMetricFamily(
            "voicelab_worker_reserved_bytes", "PyTorch reserved on this device.", labels=["device"]
        ),
    }
    for worker in status.workers:
        label = [worker.label]
        families["up"].add_metric(label, int(worker.ready))
        families["running"].add_metric(label, len(worker.in_flight_jobs))
        families["restarts"].add_metric(label, worker.restarts)
        if worker.last_stats is not None:
            families["allocated"].add_metric(label, worker.last_stats.allocated)
            families["reserved"].add_metric(label, worker.last_stats.reserved)
    yield from families.values()


class Metrics:
    """The app's registry and the request metrics the speech route observes."""

    def __init__(self, status: Callable[[], EngineStatus], telemetry: Telemetry, events: AllocatorEvents) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "voicelab_requests", "Speech requests by how they ended.", ["outcome"], registry=self.registry
        )
        for outcome in OUTCOMES:
            self.requests.labels(outcome)
        self.duration = Histogram(
            "voicelab_request_duration_seconds", "Request to last byte.", buckets=SECONDS, registry=self.registry
        )
        self.first_audio = Histogram(
            "voicelab_time_to_first_audio_seconds",
            "Job start to its first chunk.",
            buckets=SECONDS,
            registry=self.registry,
        )
        self.queue_time = Histogram(
            "voicelab_queue_time_seconds", "Time waiting in the queue.", buckets=SECONDS, registry=self.registry
        )
        self.rtf = Histogram(
            "voicelab_rtf", "Synthesis seconds per audio second.", buckets=RTF_BUCKETS, registry=self.registry
        )
        self.registry.register(EngineCollector(status, telemetry, events))

    def finished(self, outcome: str, duration_s: float, result: SynthesisResult | None = None) -> None:
        self.requests.labels(outcome).inc()
        self.duration.observe(duration_s)
        if result is not None:
            self.first_audio.observe(result.first_audio_s)
            self.queue_time.observe(result.queue_wait_s)
            if result.duration_s > 0:
                self.rtf.observe(result.rtf)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
