"""The panel's memory figures for ``/v1/memory`` and ``/metrics``: the telemetry ring's latest sample (NVML,
host) and the engine's latest allocator figures, laid out with A1111's ``/sdapi/v1/memory`` field names where
they mean the same (``ram``, ``cuda.system``, ``cuda.allocated``, ``cuda.reserved``, ``cuda.inactive``,
``cuda.events``) plus VoiceLab's own (fragmentation, outside PyTorch, largest free block).
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Any, Protocol

import psutil

from voicelab.engine.messages import AllocatorStats, CleanReport
from voicelab.engine.status import EngineStatus, RestartReport
from voicelab.telemetry.ring import RingBuffer
from voicelab.telemetry.samples import MemorySample


class Telemetry(Protocol):
    """What the routes read: the ``TelemetrySampler``'s ring (never blocking on the worker); it marks jobs too."""

    ring: RingBuffer

    def mark_job(self, job_id: str, latency_s: float) -> None: ...


@dataclass
class EventTotals:
    """Allocator retries and OOMs since the server started (heartbeats carry them as deltas)."""

    retries: int = 0
    ooms: int = 0


class AllocatorEvents:
    """A stats listener adding up the deltas; thread-safe (the supervisor thread calls it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals = EventTotals()

    def __call__(self, stats: AllocatorStats) -> None:
        with self._lock:
            self._totals.retries += stats.alloc_retries
            self._totals.ooms += stats.ooms

    def totals(self) -> EventTotals:
        with self._lock:
            return dataclasses.replace(self._totals)


def allocator_dict(stats: AllocatorStats | None) -> dict[str, Any] | None:
    """An allocator reading with its derived figures (cached free, fragmentation)."""
    if stats is None:
        return None
    return {**dataclasses.asdict(stats), "cached_free": stats.cached_free, "fragmentation": stats.fragmentation}


def clean_dict(report: CleanReport) -> dict[str, Any]:
    return {
        "before": allocator_dict(report.before),
        "after": allocator_dict(report.after),
        "freed_bytes": max(report.before.reserved - report.after.reserved, 0),
        "cleared": list(report.cleared),
        "duration_s": round(report.duration_s, 4),
    }


def restart_dict(report: RestartReport) -> dict[str, Any]:
    return {
        "old_pid": report.old_pid,
        "new_pid": report.new_pid,
        "time_to_ready_s": round(report.time_to_ready_s, 3),
        "forced": report.forced,
        "requeued_job": report.requeued_job,
        "reason": report.reason,
        "before": allocator_dict(report.before),
        "after": allocator_dict(report.after),
    }


def latest_allocator(status: EngineStatus, sample: MemorySample | None) -> AllocatorStats | None:
    if sample is not None and sample.allocator is not None:
        return sample.allocator
    return status.last_stats


def _ram(sample: MemorySample | None) -> dict[str, int]:
    if sample is not None:
        used, total = sample.host.ram_used, sample.host.ram_total
    else:
        memory = psutil.virtual_memory()
        used, total = int(memory.total - memory.available), int(memory.total)
    return {"free": max(total - used, 0), "used": used, "total": total}


def _cuda(stats: AllocatorStats | None, sample: MemorySample | None, events: EventTotals) -> dict[str, Any]:
    nvml = sample.nvml if sample is not None else None
    system = None if nvml is None else {"free": nvml.free, "used": nvml.used, "total": nvml.total}
    totals = {"retries": events.retries, "oom": events.ooms}
    if stats is None:
        return {"system": system, "allocated": None, "reserved": None, "inactive": None, "events": totals}
    return {
        "system": system,
        "allocated": {"current": stats.allocated, "peak": stats.peak_allocated},
        "reserved": {"current": stats.reserved, "peak": None},
        "inactive": {"current": stats.non_releasable, "peak": None},
        "events": totals,
    }


def memory_report(status: EngineStatus, sample: MemorySample | None, events: EventTotals) -> dict[str, Any]:
    """The ``/v1/memory`` body."""
    stats = latest_allocator(status, sample)
    return {
        "ram": _ram(sample),
        "cuda": _cuda(stats, sample, events),
        "device": stats.device if stats is not None else status.worker.device if status.worker else None,
        "cached_free": stats.cached_free if stats is not None else None,
        "fragmentation": stats.fragmentation if stats is not None else None,
        "largest_free_block": stats.largest_free_block if stats is not None else None,
        "outside_pytorch": sample.outside_pytorch if sample is not None else None,
        "gpu_note": sample.nvml_note if sample is not None else None,
        "process": {
            "server_rss": sample.host.ui_rss if sample is not None else None,
            "worker_rss": sample.host.worker_rss if sample is not None else None,
        },
        "sampled_at": sample.timestamp if sample is not None else None,
    }
