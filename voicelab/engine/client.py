"""EngineClient: the front ends' handle on an engine that runs in worker processes, one per device.

It owns the bounded queue (``JobPool``) that every worker shares and one ``WorkerSlot`` per device in
``Settings.device_list`` (``--devices cuda:0,cuda:1``; one device by default). Each slot's thread runs its own
worker single-flight, routes chunks and results back to each caller and runs its controls between jobs. A
job goes to the least-loaded healthy worker, the one holding its speaker profile first (``routing``). A crash, a
timeout or a restart touches only its device's jobs; queued jobs stay queued and move to the other devices.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from voicelab.engine.jobs import Job, RestartCall, restart_reason, with_seed
from voicelab.engine.messages import (
    AllocatorStats,
    CleanReport,
    ControlKind,
    ControlRequest,
    SegmentSnapshot,
    SynthesisRequest,
    SynthesisResult,
    WorkerReady,
)
from voicelab.engine.pool import JobPool
from voicelab.engine.proc import WorkerHandle, spawn_worker
from voicelab.engine.routing import WorkerLoad
from voicelab.engine.slot import WorkerSlot
from voicelab.engine.status import (
    EngineStatus,
    QueueView,
    RestartReport,
    combine_cleans,
    combine_restarts,
    engine_status,
)
from voicelab.engine.supervisor import CONTROL_TIMEOUT_S, STARTUP_TIMEOUT_S
from voicelab.errors import BackendLoadError, EngineStoppedError, InvalidSettingError, VoiceLabError
from voicelab.settings import Settings


class EngineClient:
    """Thread-safe: any thread may submit; each device's slot thread talks to its worker."""

    def __init__(
        self, settings: Settings, spawn: Callable[[Settings], WorkerHandle] = spawn_worker, start: bool = True
    ) -> None:
        self.settings = settings
        self._pool = JobPool(settings)
        self._listeners: list[Callable[[AllocatorStats], None]] = []
        self._slots = [
            WorkerSlot(index, settings.for_device(device), self._pool, spawn, self._forward_stats)
            for index, device in enumerate(settings.device_list)
        ]
        self._pool.loads = self._loads
        self._pool.anyone_healthy = lambda: any(slot.healthy for slot in self._slots)
        self._pool.no_device_can_load = lambda: all(
            slot.failed_to_load and not slot.supervisor.kept_dying for slot in self._slots
        )
        if start:
            for slot in self._slots:
                slot.thread.start()

    @property
    def devices(self) -> tuple[str, ...]:
        """One entry per worker, in the order ``worker=`` indexes them."""
        return tuple(slot.device for slot in self._slots)

    # ---- jobs ----

    def submit(self, request: SynthesisRequest) -> Job:
        """Queue a job; raises EngineBusyError at once when the queue is full."""
        job = Job(with_seed(request))
        self._pool.submit(job)
        return job

    def synthesize(self, request: SynthesisRequest, timeout: float | None = None) -> SynthesisResult:
        return self.submit(request).result(timeout)

    def _loads(self, request: SynthesisRequest) -> list[WorkerLoad]:
        sha = request.prompt.sha256 if request.prompt is not None else None
        return [slot.load_for(sha) for slot in self._slots]

    # ---- controls: one device (``worker=``) or all ----

    def clean_cache(self, clear_profiles: bool = False, *, worker: int | None = None) -> CleanReport:
        """Clean one worker's cache, or every worker's (figures summed) when ``worker`` is None."""
        reports = self._control_each(ControlKind.CLEAN_CACHE, worker, clear_profiles)
        return reports[0] if len(reports) == 1 else combine_cleans(reports)

    def memory_snapshot(self, *, worker: int | None = None) -> SegmentSnapshot:
        """The segment map of one worker (the first one that can answer when ``worker`` is None)."""
        return self._control_each(ControlKind.SNAPSHOT, worker)[0] if worker is not None else self._first_answer()

    def allocator_stats(self, *, worker: int | None = None) -> AllocatorStats:
        return self._control_each(ControlKind.STATS, 0 if worker is None else worker)[0]

    def soft_restart(
        self,
        force: bool = False,
        timeout: float | None = STARTUP_TIMEOUT_S,
        *,
        worker: int | None = None,
        backend: str | None = None,
    ) -> RestartReport:
        """Replace a worker; the job in flight finishes first unless ``force`` (then it is requeued).

        ``backend``: the new worker loads this backend, and so does every later one (the voice engine switch);
        queued jobs stay queued and are spoken by it. With several devices and no ``worker``, they are restarted
        one after another, so the others keep serving.
        """
        if worker is not None or len(self._slots) == 1:
            return self._restart_one(self._slot(worker or 0), force, timeout, backend)
        reports = [self._restart_one(slot, force, timeout, backend) for slot in self._slots]
        return combine_restarts(reports)

    def _slot(self, worker: int) -> WorkerSlot:
        if not 0 <= worker < len(self._slots):
            raise InvalidSettingError(f"There is no worker {worker}; this engine has {len(self._slots)}.")
        return self._slots[worker]

    def _restart_one(
        self, slot: WorkerSlot, force: bool, timeout: float | None, backend: str | None = None
    ) -> RestartReport:
        """A restart already pending answers this one too, unless it loads another backend: then ours follows it."""
        future: Future[RestartReport] = Future()
        with self._pool.lock:
            if self._pool.stopping:
                raise EngineStoppedError()
            pending = slot.restart
            if pending is None:
                slot.restart = RestartCall(force, restart_reason(backend), future, backend)
                self._pool.lock.notify_all()
            elif backend in (None, pending.backend):
                future = pending.future
        if pending is not None and future is not pending.future:
            with contextlib.suppress(VoiceLabError):  # how the other one ended is its caller's to hear
                pending.future.result(timeout)
            return self._restart_one(slot, force, timeout, backend)
        return future.result(timeout)

    def _control_each(self, kind: ControlKind, worker: int | None, clear_profiles: bool = False) -> list[Any]:
        """Run a control on one worker or on every worker that can take it (at the same time)."""
        with self._pool.lock:
            if self._pool.stopping:
                raise EngineStoppedError()
            slots = [self._slot(worker)] if worker is not None else [s for s in self._slots if not s.failed_to_load]
        if not slots:
            raise BackendLoadError(self.status().load_error)
        futures = [slot.call(ControlRequest(kind, clear_profiles=clear_profiles)) for slot in slots]
        return [future.result(CONTROL_TIMEOUT_S + self.settings.job_timeout_s) for future in futures]

    def _first_answer(self) -> SegmentSnapshot:
        with self._pool.lock:
            ready = [s.index for s in self._slots if s.healthy] or [0]
        return self._control_each(ControlKind.SNAPSHOT, ready[0])[0]

    # ---- state ----

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> WorkerReady:
        """Every worker ready (or failed); the first ready one's READY. After a failed load, one more try each."""
        deadline = time.monotonic() + timeout
        with self._pool.lock:
            retried = {s.index: s.start_attempts for s in self._slots if s.failed_to_load}
            for slot in self._slots:
                slot.retry_load = slot.retry_load or slot.index in retried
            self._pool.lock.notify_all()

            def settled(slot: WorkerSlot) -> bool:
                if slot.index in retried and slot.start_attempts == retried[slot.index]:
                    return False
                return slot.supervisor.ready is not None or slot.failed_to_load

            while not all(settled(s) for s in self._slots):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._pool.stopping:
                    break
                self._pool.lock.wait(min(remaining, 1.0))
            ready = [s.supervisor.ready for s in self._slots if s.supervisor.ready is not None]
            if ready:
                return ready[0]
            errors = [s.supervisor.load_error for s in self._slots if s.failed_to_load]
        if errors and len(errors) == len(self._slots):
            raise BackendLoadError(self.status().load_error)
        raise TimeoutError("the engine worker did not become ready in time")

    def status(self) -> EngineStatus:
        with self._pool.lock:
            workers = [slot.status() for slot in self._slots]
            return engine_status(workers, len(self._pool.jobs), self._pool.counters)

    def queue_view(self) -> QueueView:
        """Read-only, for progress lines: the longest-running accepted job, the queue, whether any worker is up."""
        with self._pool.lock:
            flights = [f for slot in self._slots for f in slot.in_flight.values() if f.accepted_at]
            first = min(flights, key=lambda f: f.accepted_at, default=None)
            no_worker = not any(slot.healthy for slot in self._slots)
            job, since = (first.job, first.accepted_at) if first else (None, 0.0)
            return QueueView.of(job, since, self._pool.jobs, no_worker)

    def add_stats_listener(self, listener: Callable[[AllocatorStats], None]) -> None:
        """Called from a slot thread with every allocator sample of the first ready worker (the panel's timeline)."""
        self._listeners.append(listener)

    def _forward_stats(self, slot: WorkerSlot, stats: AllocatorStats) -> None:
        primary = next((s for s in self._slots if s.healthy), self._slots[0])
        if slot is primary:
            for listener in self._listeners:
                listener(stats)

    def close(self, timeout: float = 10.0) -> None:
        self._pool.stop()
        for slot in self._slots:
            if slot.thread.is_alive():
                slot.thread.join(timeout)
        for slot in self._slots:
            slot.abandon(EngineStoppedError())

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
