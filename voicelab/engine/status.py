"""What the engine reports about itself: status for the panel, restart reports, and the worker's latest figures.

With several devices each worker has its own ``WorkerStatus``; ``EngineStatus`` keeps the one-worker fields
(read by ``/health``, metrics and the panel's engine line) as the sum, or as the first ready worker's figures.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from voicelab.backends.base import GraphBucket
from voicelab.engine.messages import (
    AllocatorStats,
    CleanReport,
    Heartbeat,
    SynthesisRequest,
    SynthesisResult,
    WorkerReady,
)
from voicelab.voice.cache import ProfileCacheStats


@dataclass(frozen=True)
class RestartReport:
    """What a soft restart did, for the panel's before → after."""

    old_pid: int
    new_pid: int
    time_to_ready_s: float
    forced: bool
    requeued_job: str | None
    before: AllocatorStats | None
    after: AllocatorStats | None
    reason: str
    device: str = ""
    workers: tuple[RestartReport, ...] = ()  # one per device when several were restarted (one after another)


@dataclass(frozen=True)
class WorkerStatus:
    """One device's worker: its state ("starting", "ready", "restarting" or "failed"), jobs and latest figures."""

    index: int
    device: str
    state: str
    pid: int
    in_flight_jobs: tuple[str, ...]
    completed: int
    failed: int
    restarts: int
    start_deaths: int
    worker: WorkerReady | None
    last_stats: AllocatorStats | None
    last_heartbeat_age_s: float | None
    load_error: str | None
    leak_warning: str | None
    profile_cache: ProfileCacheStats | None
    model_loaded: bool
    uptime_s: float | None
    graphs: tuple[GraphBucket, ...] = ()  # this worker's CUDA graph buckets (from its heartbeats)
    name: str = ""  # what the panel calls it when its device alone does not say (a Ray Serve replica)
    vram: tuple[int, int] | None = None  # (used, total) bytes of its GPU, measured where it runs (another node)

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    @property
    def label(self) -> str:
        """ "cuda:1", or "cpu #1" where one device name runs several workers; a replica's own name."""
        if self.name:
            return self.name
        return self.device if self.device.startswith("cuda:") else f"{self.device} #{self.index}"


@dataclass(frozen=True)
class EngineStatus:
    """A consistent view of the engine for the panel, ``/health`` and tests."""

    ready: bool
    queue_length: int
    in_flight_job: str | None
    worker_pid: int
    restarts: int
    completed: int
    failed: int
    worker: WorkerReady | None
    last_stats: AllocatorStats | None
    last_heartbeat_age_s: float | None
    load_error: str | None
    leak_warning: str | None
    profile_cache: ProfileCacheStats | None = None
    model_loaded: bool = True
    worker_uptime_s: float | None = None
    workers: tuple[WorkerStatus, ...] = ()
    speed: JobSpeed | None = None
    graphs: tuple[GraphBucket, ...] = ()
    dashboard_url: str = ""  # the cluster's own dashboard, when the engine's workers are Ray Serve replicas


@dataclass(frozen=True)
class QueueView:
    """Who is ahead of whom, for honest progress lines: the job in flight (its text) and the queued job ids.

    in_flight_text: the text of the job the worker runs now ("" when none); in_flight_s: for how long.
    queued: job ids waiting, next first. waiting_for_worker: a job is due but no worker is ready yet.
    """

    in_flight_text: str = ""
    in_flight_s: float = 0.0
    queued: tuple[str, ...] = ()
    waiting_for_worker: bool = False

    @classmethod
    def of(cls, in_flight: object, since: float, queued: Iterable[Any], no_worker: bool) -> QueueView:
        """The view of a client's state: ``in_flight`` is a job, a control call or ``None``; ``queued`` jobs."""
        ids = tuple(job.job_id for job in queued)
        request = getattr(in_flight, "request", None)
        if isinstance(request, SynthesisRequest):
            return cls(request.text, time.monotonic() - since, ids, no_worker and bool(ids))
        return cls("", 0.0, ids, no_worker and bool(ids))

    def ahead_of(self, job_id: str) -> int | None:
        """How many jobs run before ``job_id`` (the one in flight included); ``None`` when it is not queued."""
        if job_id not in self.queued:
            return None
        return self.queued.index(job_id) + (1 if self.in_flight_text else 0)


@dataclass(frozen=True)
class JobSpeed:
    """Recent jobs as callers felt them: time to first audio (queue wait included) and device batch sizes."""

    jobs: int
    first_audio_p50_s: float
    first_audio_last_s: float
    mean_batch: float
    largest_batch: int


@dataclass
class JobCounters:
    """Jobs finished by outcome (one counter per fact; restarts are the supervisor's), and the recent ones' speed."""

    completed: int = 0
    failed: int = 0
    recent: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=200))

    def finished(self, result: SynthesisResult | None) -> None:
        """Count one job: a result (completed) or None (failed)."""
        if result is None:
            self.failed += 1
            return
        self.completed += 1
        self.recent.append((result.first_audio_s + result.queue_wait_s, result.batch_size))

    def speed(self) -> JobSpeed | None:
        recent = list(self.recent)
        if not recent:
            return None
        sizes = [size for _, size in recent]
        first = statistics.median(t for t, _ in recent)
        return JobSpeed(len(recent), first, recent[-1][0], statistics.fmean(sizes), max(sizes))


def engine_status(workers: Sequence[WorkerStatus], queue_length: int, counters: JobCounters) -> EngineStatus:
    """The whole engine: ready when any worker is; jobs counted once; the first ready worker's figures."""
    primary = next((w for w in workers if w.ready), workers[0])
    ready = any(w.ready for w in workers)
    in_flight = next((job for w in workers for job in w.in_flight_jobs), None)
    several = len(workers) > 1
    leaks = [f"{w.label}: {w.leak_warning}" if several else w.leak_warning for w in workers if w.leak_warning]
    errors = [f"{w.label}: {w.load_error}" if several else w.load_error for w in workers if w.load_error]
    return EngineStatus(
        ready=ready,
        queue_length=queue_length,
        in_flight_job=in_flight,
        worker_pid=primary.pid,
        restarts=sum(w.restarts for w in workers),
        completed=counters.completed,
        failed=counters.failed,
        worker=primary.worker,
        last_stats=primary.last_stats,
        last_heartbeat_age_s=primary.last_heartbeat_age_s,
        load_error=None if ready or not errors else " ".join(errors),
        leak_warning=" ".join(leaks) or None,
        profile_cache=_sum_caches([w.profile_cache for w in workers]),
        model_loaded=primary.model_loaded,
        worker_uptime_s=primary.uptime_s,
        workers=tuple(workers),
        speed=counters.speed(),
        graphs=primary.graphs,
    )


def _sum_caches(caches: Sequence[ProfileCacheStats | None]) -> ProfileCacheStats | None:
    known = [c for c in caches if c is not None]
    if not known:
        return None
    return ProfileCacheStats(
        size=sum(c.size for c in known),
        capacity=sum(c.capacity for c in known),
        hits=sum(c.hits for c in known),
        misses=sum(c.misses for c in known),
        evictions=sum(c.evictions for c in known),
        device_bytes=sum(c.device_bytes for c in known),
        judge_bytes=sum(c.judge_bytes for c in known),
    )


def sum_stats(stats: Sequence[AllocatorStats | None]) -> AllocatorStats | None:
    """Several workers' allocator figures as one (bytes summed, device names joined); None if any is unknown."""
    if not stats or any(s is None for s in stats):
        return None
    known = [s for s in stats if s is not None]
    return AllocatorStats(
        device="+".join(s.device for s in known),
        allocated=sum(s.allocated for s in known),
        reserved=sum(s.reserved for s in known),
        non_releasable=sum(s.non_releasable for s in known),
        peak_allocated=sum(s.peak_allocated for s in known),
        alloc_retries=sum(s.alloc_retries for s in known),
        ooms=sum(s.ooms for s in known),
        worker_rss=sum(s.worker_rss for s in known),
    )


def combine_cleans(reports: Sequence[CleanReport]) -> CleanReport:
    """Every worker's clean as one before → after (they ran at the same time, so the longest is the duration)."""
    before, after = sum_stats([r.before for r in reports]), sum_stats([r.after for r in reports])
    assert before is not None and after is not None
    cleared = tuple(dict.fromkeys(item for r in reports for item in r.cleared))
    return CleanReport(before, after, cleared, max(r.duration_s for r in reports))


def combine_restarts(reports: Sequence[RestartReport]) -> RestartReport:
    """Workers restarted one after another, as one report (the first's pids; each one's in ``workers``)."""
    first = reports[0]
    return RestartReport(
        old_pid=first.old_pid,
        new_pid=first.new_pid,
        time_to_ready_s=sum(r.time_to_ready_s for r in reports),
        forced=first.forced,
        requeued_job=next((r.requeued_job for r in reports if r.requeued_job), None),
        before=sum_stats([r.before for r in reports]),
        after=sum_stats([r.after for r in reports]),
        reason=first.reason,
        device="all",
        workers=tuple(reports),
    )


class WorkerFigures:
    """The worker's latest reported figures (heartbeats and stats replies), read by ``status()``."""

    def __init__(self) -> None:
        self.stats: AllocatorStats | None = None
        self.heartbeat_at = 0.0
        self.leak_warning: str | None = None
        self.profile_cache: ProfileCacheStats | None = None
        self.model_loaded = True
        self.graphs: tuple[GraphBucket, ...] = ()

    def record_heartbeat(self, beat: Heartbeat) -> None:
        self.heartbeat_at = time.monotonic()
        self.leak_warning = beat.leak_warning
        self.profile_cache = beat.profile_cache
        self.model_loaded = beat.model_loaded
        self.graphs = beat.graphs

    def heartbeat_age_s(self) -> float | None:
        return time.monotonic() - self.heartbeat_at if self.heartbeat_at else None
