"""What the engine reports about itself: status for the panel, restart reports, and the worker's latest figures."""

from __future__ import annotations

import statistics
import time
from collections import deque
from dataclasses import dataclass, field

from voicelab.backends.base import GraphBucket
from voicelab.engine.messages import AllocatorStats, Heartbeat, SynthesisResult, WorkerReady
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
    speed: JobSpeed | None = None
    graphs: tuple[GraphBucket, ...] = ()


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
