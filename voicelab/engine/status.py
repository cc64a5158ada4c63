"""What the engine reports about itself: status for the panel, restart reports, and the worker's latest figures."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from voicelab.engine.messages import AllocatorStats, Heartbeat, SynthesisRequest, WorkerReady
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
