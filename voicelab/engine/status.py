"""What the engine reports about itself: status for the panel, restart reports, and the worker's latest figures."""

from __future__ import annotations

import time
from dataclasses import dataclass

from voicelab.engine.messages import AllocatorStats, Heartbeat, WorkerReady
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


@dataclass
class JobCounters:
    """Jobs finished by outcome (one counter per fact; restarts are the supervisor's)."""

    completed: int = 0
    failed: int = 0


class WorkerFigures:
    """The worker's latest reported figures (heartbeats and stats replies), read by ``status()``."""

    def __init__(self) -> None:
        self.stats: AllocatorStats | None = None
        self.heartbeat_at = 0.0
        self.leak_warning: str | None = None
        self.profile_cache: ProfileCacheStats | None = None
        self.model_loaded = True

    def record_heartbeat(self, beat: Heartbeat) -> None:
        self.heartbeat_at = time.monotonic()
        self.leak_warning = beat.leak_warning
        self.profile_cache = beat.profile_cache
        self.model_loaded = beat.model_loaded

    def heartbeat_age_s(self) -> float | None:
        return time.monotonic() - self.heartbeat_at if self.heartbeat_at else None
