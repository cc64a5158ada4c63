"""The engine as every front end sees it: ``EngineClient`` (worker processes) and ``InprocClient`` both fit.

``worker=`` picks one device's worker (an index into ``status().workers``); left out, a control acts on every
worker (a soft restart restarts them one after another). An engine with one worker ignores nothing: index 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from voicelab.engine.jobs import Job
from voicelab.engine.messages import AllocatorStats, CleanReport, SegmentSnapshot, SynthesisRequest, WorkerReady
from voicelab.engine.status import EngineStatus, QueueView, RestartReport
from voicelab.settings import Settings


class Engine(Protocol):
    settings: Settings

    def submit(self, request: SynthesisRequest) -> Job:
        """Queue a job (``EngineBusyError`` at once when the queue is full); its chunks and result follow."""
        ...

    def clean_cache(self, clear_profiles: bool = False, *, worker: int | None = None) -> CleanReport: ...

    def soft_restart(
        self, force: bool = False, *, worker: int | None = None, backend: str | None = None
    ) -> RestartReport:
        """Replace the worker(s) between jobs; ``backend``: load that one from now on (the voice engine switch)."""
        ...

    def memory_snapshot(self, *, worker: int | None = None) -> SegmentSnapshot: ...

    def status(self) -> EngineStatus: ...

    def queue_view(self) -> QueueView:
        """Read-only: the job in flight (its text) and the queued job ids, for progress lines."""
        ...

    def wait_ready(self, timeout: float = ...) -> WorkerReady: ...

    def add_stats_listener(self, listener: Callable[[AllocatorStats], None]) -> None: ...

    def close(self, timeout: float = ...) -> None: ...
