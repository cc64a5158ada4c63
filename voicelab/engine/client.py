"""EngineClient: the UI's only handle on the engine.

It owns the bounded queue, dispatches one job at a time to the worker process (single flight), runs control
requests between jobs, and supervises the worker: a crash or a timeout fails only the job in flight and the
worker is replaced; queued jobs stay queued. A soft restart replaces the worker while the queue stays.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

from voicelab.engine.messages import (
    AllocatorStats,
    CleanReport,
    ControlKind,
    ControlReply,
    ControlRequest,
    ErrorReply,
    Heartbeat,
    JobAccepted,
    ProfileCacheStats,
    SegmentSnapshot,
    SynthesisRequest,
    SynthesisResult,
    WorkerReady,
)
from voicelab.engine.proc import WorkerHandle, spawn_worker
from voicelab.errors import (
    BackendLoadError,
    EngineBusyError,
    EngineStoppedError,
    JobTimeoutError,
    VoiceLabError,
    WorkerCrashedError,
    error_from_name,
)
from voicelab.settings import Settings

log = logging.getLogger(__name__)

POLL_S = 0.05
STARTUP_TIMEOUT_S = 300.0
CONTROL_TIMEOUT_S = 120.0


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
    last_auto_clean: CleanReport | None
    profile_cache: ProfileCacheStats | None = None
    model_loaded: bool = True


@dataclass
class _Job:
    request: SynthesisRequest
    future: Future[Any]
    enqueued_at: float = field(default_factory=time.monotonic)


@dataclass
class _Control:
    request: ControlRequest
    future: Future[Any]


@dataclass
class _Restart:
    force: bool
    reason: str
    future: Future[RestartReport]


class EngineClient:
    """Thread-safe: any UI thread may submit; one supervisor thread talks to the worker."""

    def __init__(
        self, settings: Settings, spawn: Callable[[Settings], WorkerHandle] = spawn_worker, start: bool = True
    ) -> None:
        self.settings = settings
        self._spawn = spawn
        self._lock = threading.Condition()
        self._jobs: deque[_Job] = deque()
        self._controls: deque[_Control] = deque()
        self._restart: _Restart | None = None
        self._stopping = False
        self._worker: WorkerHandle | None = None
        self._ready: WorkerReady | None = None
        self._in_flight: _Job | _Control | None = None
        self._in_flight_since = 0.0
        self._accepted = False  # the worker acknowledged the job in flight
        self._last_stats: AllocatorStats | None = None
        self._last_heartbeat = 0.0
        self._load_error: str | None = None
        self._leak_warning: str | None = None
        self._last_auto_clean: CleanReport | None = None
        self._profile_cache: ProfileCacheStats | None = None
        self._model_loaded = True
        self._restarts = 0
        self._completed = 0
        self._failed = 0
        self._listeners: list[Callable[[AllocatorStats], None]] = []
        self._thread = threading.Thread(target=self._supervise, name="voicelab-supervisor", daemon=True)
        if start:
            self._thread.start()

    # ---- public API (any thread) ----

    def submit(self, request: SynthesisRequest) -> Future[SynthesisResult]:
        """Queue a job; raises EngineBusyError at once when the queue is full."""
        future: Future[SynthesisResult] = Future()
        with self._lock:
            if self._stopping:
                raise EngineStoppedError()
            if len(self._jobs) >= self.settings.queue_size:
                raise EngineBusyError(
                    f"The engine is busy: {len(self._jobs)} jobs are already waiting. Please try again in a moment."
                )
            self._jobs.append(_Job(replace(request, submitted_at=time.monotonic()), future))
            self._lock.notify_all()
        return future

    def synthesize(self, request: SynthesisRequest, timeout: float | None = None) -> SynthesisResult:
        return self.submit(request).result(timeout)

    def clean_cache(self, clear_profiles: bool = False) -> CleanReport:
        return self._control(ControlRequest(ControlKind.CLEAN_CACHE, clear_profiles=clear_profiles))

    def memory_snapshot(self) -> SegmentSnapshot:
        return self._control(ControlRequest(ControlKind.SNAPSHOT))

    def allocator_stats(self) -> AllocatorStats:
        return self._control(ControlRequest(ControlKind.STATS))

    def soft_restart(self, force: bool = False, timeout: float | None = STARTUP_TIMEOUT_S) -> RestartReport:
        """Replace the worker; the job in flight finishes first unless ``force`` (then it is requeued)."""
        future: Future[RestartReport] = Future()
        with self._lock:
            if self._restart is not None:
                return self._restart.future.result(timeout)
            self._restart = _Restart(force, "soft restart requested", future)
            self._lock.notify_all()
        return future.result(timeout)

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> WorkerReady:
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._ready is None:
                if self._load_error:
                    raise BackendLoadError(self._load_error)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("the engine worker did not become ready in time")
                self._lock.wait(remaining)
            return self._ready

    def status(self) -> EngineStatus:
        with self._lock:
            in_flight = self._in_flight
            return EngineStatus(
                ready=self._ready is not None,
                queue_length=len(self._jobs),
                in_flight_job=in_flight.request.job_id if isinstance(in_flight, _Job) and self._accepted else None,
                worker_pid=self._worker.pid if self._worker else 0,
                restarts=self._restarts,
                completed=self._completed,
                failed=self._failed,
                worker=self._ready,
                last_stats=self._last_stats,
                last_heartbeat_age_s=time.monotonic() - self._last_heartbeat if self._last_heartbeat else None,
                load_error=self._load_error,
                leak_warning=self._leak_warning,
                last_auto_clean=self._last_auto_clean,
                profile_cache=self._profile_cache,
                model_loaded=self._model_loaded,
            )

    def add_stats_listener(self, listener: Callable[[AllocatorStats], None]) -> None:
        """Called from the supervisor thread with every allocator sample (heartbeats and job ends)."""
        self._listeners.append(listener)

    def close(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._fail_all(EngineStoppedError())

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- supervisor thread ----

    def _supervise(self) -> None:
        try:
            while True:
                with self._lock:
                    if self._stopping:
                        break
                try:
                    self._step()
                except Exception:  # the supervisor must outlive any single bug; the worker is replaced
                    log.exception("supervisor step failed; replacing the worker")
                    if self._worker is not None:
                        self._worker.kill()
        finally:
            self._shutdown_worker()

    def _step(self) -> None:
        if self._worker is None or not self._worker.alive():
            self._handle_dead_worker()
            return
        self._maybe_restart()
        self._dispatch_next()
        self._pump()
        self._check_timeout()

    def _start_worker(self) -> None:
        started = time.monotonic()
        worker = self._spawn(self.settings)
        deadline = started + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if worker.conn.poll(POLL_S):
                try:
                    message = worker.conn.recv()
                except (EOFError, OSError):
                    break
                if isinstance(message, WorkerReady):
                    with self._lock:
                        self._worker, self._ready, self._load_error = worker, message, None
                        self._last_heartbeat = time.monotonic()
                        self._lock.notify_all()
                    log.info("worker %d ready in %.1fs", message.pid, time.monotonic() - started)
                    return
                if isinstance(message, ErrorReply):
                    self._set_load_error(worker, message.message)
                    return
            elif not worker.alive():
                break
            with self._lock:
                if self._stopping:
                    worker.kill()
                    return
        self._set_load_error(worker, "The engine worker failed to start; see the log for details.")

    def _set_load_error(self, worker: WorkerHandle, message: str) -> None:
        worker.kill()
        log.error("worker failed to start: %s", message)
        with self._lock:
            self._worker, self._ready, self._load_error = None, None, message
            self._lock.notify_all()
        self._fail_all(BackendLoadError(message))

    def _handle_dead_worker(self) -> None:
        with self._lock:
            in_flight, self._in_flight = self._in_flight, None
            had_worker = self._worker is not None
            self._ready = None
        if had_worker:
            self._restarts += 1
            if self._worker is not None:
                self._worker.kill()
            self._worker = None
        if isinstance(in_flight, _Job) and not self._accepted:
            with self._lock:  # the worker died before it had the job (e.g. killed while idle): run it on the next one
                self._jobs.appendleft(in_flight)
        elif in_flight is not None:
            self._finish(in_flight, error=WorkerCrashedError())
        with self._lock:
            # After a failed start, wait for work (or a restart request) instead of spinning.
            while self._load_error and not self._stopping and not self._jobs and self._restart is None:
                self._lock.wait(1.0)
            if self._stopping:
                return
        restart = self._take_restart()
        before = self._last_stats
        started = time.monotonic()
        self._start_worker()
        if restart is not None:
            self._resolve_restart(restart, 0, started, before, None)

    def _take_restart(self) -> _Restart | None:
        with self._lock:
            restart, self._restart = self._restart, None
            return restart

    def _maybe_restart(self) -> None:
        with self._lock:
            restart = self._restart
            if restart is None or (self._in_flight is not None and not restart.force):
                return
            self._restart = None
            in_flight = self._in_flight
            requeued = in_flight if isinstance(in_flight, _Job) else None
            if requeued is not None:
                self._jobs.appendleft(requeued)
            elif isinstance(in_flight, _Control):
                self._controls.appendleft(in_flight)
            self._in_flight = None
            self._ready = None
        assert self._worker is not None
        old_pid, before = self._worker.pid, self._last_stats
        started = time.monotonic()
        self._worker.kill()
        self._worker = None
        self._restarts += 1
        self._start_worker()
        self._resolve_restart(restart, old_pid, started, before, requeued.request.job_id if requeued else None)

    def _resolve_restart(
        self, restart: _Restart, old_pid: int, started: float, before: AllocatorStats | None, requeued: str | None
    ) -> None:
        if self._worker is None:
            restart.future.set_exception(BackendLoadError(self._load_error))
            return
        after = self._query_stats()
        restart.future.set_result(
            RestartReport(
                old_pid=old_pid,
                new_pid=self._worker.pid,
                time_to_ready_s=time.monotonic() - started,
                forced=restart.force,
                requeued_job=requeued,
                before=before,
                after=after,
                reason=restart.reason,
            )
        )

    def _query_stats(self) -> AllocatorStats | None:
        """A synchronous stats round-trip right after READY (nothing else is in flight then)."""
        assert self._worker is not None
        request = ControlRequest(ControlKind.STATS)
        self._worker.conn.send(request)
        deadline = time.monotonic() + CONTROL_TIMEOUT_S
        while time.monotonic() < deadline and self._worker.conn.poll(deadline - time.monotonic()):
            message = self._worker.conn.recv()
            if isinstance(message, ControlReply) and message.request_id == request.request_id:
                assert isinstance(message.payload, AllocatorStats)
                self._record_stats(message.payload)
                return message.payload
            self._handle_message(message)
        return None

    def _dispatch_next(self) -> None:
        with self._lock:
            if self._in_flight is not None or self._worker is None:
                return
            if not self._controls and not self._jobs:
                self._lock.wait(POLL_S)
            item: _Job | _Control | None = None
            if self._controls:
                item = self._controls.popleft()
            elif self._jobs:
                item = self._jobs.popleft()
            if item is None:
                return
            if not item.future.running() and not item.future.set_running_or_notify_cancel():
                return  # cancelled by its caller while queued
            self._in_flight, self._in_flight_since, self._accepted = item, time.monotonic(), False
        # A dead worker is noticed on the next loop, and the job then fails as a crash.
        with contextlib.suppress(OSError):
            self._worker.conn.send(item.request)

    def _pump(self) -> None:
        worker = self._worker
        if worker is None:
            return
        try:
            while worker.conn.poll(0 if self._in_flight is None else POLL_S):
                self._handle_message(worker.conn.recv())
        except (EOFError, OSError):
            worker.process.join(timeout=1.0)

    def _handle_message(self, message: Any) -> None:
        if isinstance(message, JobAccepted):
            in_flight = self._in_flight
            if isinstance(in_flight, _Job) and in_flight.request.job_id == message.job_id:
                with self._lock:
                    self._accepted = True
            return
        if isinstance(message, Heartbeat):
            self._last_heartbeat = time.monotonic()
            self._leak_warning = message.leak_warning
            self._profile_cache = message.profile_cache
            self._model_loaded = message.model_loaded
            self._record_stats(message.stats)
            return
        in_flight = self._in_flight
        request_id = message.request_id if isinstance(message, (ControlReply, ErrorReply)) else message.job_id
        if isinstance(message, ControlReply) and message.request_id == "auto-clean":
            self._last_auto_clean = message.payload if isinstance(message.payload, CleanReport) else None
            return
        if in_flight is None or _request_id(in_flight) != request_id:
            log.warning("dropping a reply for %s, which is not in flight", request_id)
            return
        with self._lock:
            self._in_flight = None
        if isinstance(message, ErrorReply):
            self._finish(in_flight, error=error_from_name(message.error_type, message.message))
        elif isinstance(message, SynthesisResult):
            assert isinstance(in_flight, _Job)
            wait = self._in_flight_since - in_flight.enqueued_at
            self._finish(in_flight, value=replace(message, queue_wait_s=wait))
        else:
            self._finish(in_flight, value=message.payload)

    def _record_stats(self, stats: AllocatorStats) -> None:
        self._last_stats = stats
        for listener in self._listeners:
            listener(stats)

    def _check_timeout(self) -> None:
        in_flight = self._in_flight
        if not isinstance(in_flight, _Job) or self._worker is None:
            return
        if time.monotonic() - self._in_flight_since <= self.settings.job_timeout_s:
            return
        log.error("job %s timed out; replacing the worker", in_flight.request.job_id)
        with self._lock:
            self._in_flight = None
        self._worker.kill()
        self._finish(
            in_flight,
            error=JobTimeoutError(
                f"Generation took longer than {self.settings.job_timeout_s:.0f} s and was stopped; "
                "the engine was restarted. Try shorter text."
            ),
        )

    def _finish(self, item: _Job | _Control, value: Any = None, error: VoiceLabError | None = None) -> None:
        if isinstance(item, _Job):
            if error is None:
                self._completed += 1
            else:
                self._failed += 1
        if error is not None:
            item.future.set_exception(error)
        else:
            item.future.set_result(value)

    def _control(self, request: ControlRequest) -> Any:
        future: Future[Any] = Future()
        with self._lock:
            if self._stopping:
                raise EngineStoppedError()
            if self._load_error and self._worker is None:
                raise BackendLoadError(self._load_error)
            self._controls.append(_Control(request, future))
            self._lock.notify_all()
        return future.result(CONTROL_TIMEOUT_S + self.settings.job_timeout_s)

    def _fail_all(self, error: VoiceLabError) -> None:
        with self._lock:
            pending: list[_Job | _Control] = [*self._jobs, *self._controls]
            self._jobs.clear()
            self._controls.clear()
        for item in pending:
            if not item.future.done():
                item.future.set_exception(type(error)(str(error)))

    def _shutdown_worker(self) -> None:
        worker, self._worker = self._worker, None
        if worker is None:
            return
        with contextlib.suppress(OSError):
            worker.conn.send(ControlRequest(ControlKind.SHUTDOWN))
            worker.process.join(timeout=5)
        worker.kill()


def _request_id(item: _Job | _Control) -> str:
    return item.request.job_id if isinstance(item, _Job) else item.request.request_id
