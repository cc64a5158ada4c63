"""EngineClient: the front ends' handle on an engine that runs in a worker process.

Bounded queue, one batch at a time (one job, or compatible jobs micro-batched by ``engine.microbatch``), each job's
chunks and result routed to its caller, controls between jobs. The ``WorkerSupervisor`` owns the worker: a crash
fails only the job in flight (batch-mates run again alone), a timeout its batch; queued jobs stay queued.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from voicelab.engine import jobs
from voicelab.engine.jobs import ControlCall, Job, JobBatch, RestartCall
from voicelab.engine.messages import (
    AllocatorStats,
    ChunkReady,
    CleanReport,
    ControlKind,
    ControlReply,
    ControlRequest,
    ErrorReply,
    Heartbeat,
    JobAccepted,
    SegmentSnapshot,
    SynthesisRequest,
    SynthesisResult,
    WorkerReady,
)
from voicelab.engine.microbatch import MicroBatcher, limits_from
from voicelab.engine.proc import WorkerHandle, spawn_worker
from voicelab.engine.status import EngineStatus, JobCounters, RestartReport, WorkerFigures
from voicelab.engine.supervisor import POLL_S, STARTUP_TIMEOUT_S, WorkerSupervisor
from voicelab.errors import (
    BackendLoadError,
    EngineStoppedError,
    VoiceLabError,
    WorkerCrashedError,
    error_from_name,
)
from voicelab.settings import Settings

log = logging.getLogger(__name__)

CONTROL_TIMEOUT_S = 120.0
AUTO_CLEAN_ID = "auto-clean"


class EngineClient:
    """Thread-safe: any thread may submit; one supervisor thread talks to the worker."""

    def __init__(
        self, settings: Settings, spawn: Callable[[Settings], WorkerHandle] = spawn_worker, start: bool = True
    ) -> None:
        self.settings = settings
        self._worker = WorkerSupervisor(settings, spawn)
        self._lock = threading.Condition()
        self._jobs: deque[Job] = deque()
        self._controls: deque[ControlCall] = deque()
        self._restart: RestartCall | None = None
        self._stopping = False
        self._in_flight: JobBatch | ControlCall | None = None
        self._in_flight_since = 0.0
        self._batcher = MicroBatcher(limits_from(settings))
        self._start_attempts = 0
        self._retry_load = False  # wait_ready asks for another load attempt after a failed one
        self._figures = WorkerFigures()
        self._counters = JobCounters()
        self._listeners: list[Callable[[AllocatorStats], None]] = []
        self._thread = threading.Thread(target=self._supervise, name="voicelab-supervisor", daemon=True)
        if start:
            self._thread.start()

    # ---- public API (any thread) ----

    def submit(self, request: SynthesisRequest) -> Job:
        """Queue a job; raises EngineBusyError at once when the queue is full."""
        job = Job(jobs.with_seed(request))
        with self._lock:
            if self._stopping:
                raise EngineStoppedError()
            if len(self._jobs) >= self.settings.queue_size:
                raise jobs.busy_error(len(self._jobs))
            self._jobs.append(job)
            self._lock.notify_all()
        return job

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
            self._restart = RestartCall(force, "soft restart requested", future)
            self._lock.notify_all()
        return future.result(timeout)

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> WorkerReady:
        """The worker's READY; after a failed load this tries loading again once (the file may be fixed now)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            if self._worker.ready is None and self._worker.load_error:
                attempt, self._retry_load = self._start_attempts, True
                self._lock.notify_all()
                while self._start_attempts == attempt and time.monotonic() < deadline and not self._stopping:
                    self._lock.wait(min(1.0, max(deadline - time.monotonic(), 0.01)))
            while self._worker.ready is None:
                if self._worker.load_error:
                    raise BackendLoadError(self._worker.load_error)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("the engine worker did not become ready in time")
                self._lock.wait(remaining)
            return self._worker.ready

    def status(self) -> EngineStatus:
        with self._lock:
            in_flight, figures = self._in_flight, self._figures
            return EngineStatus(
                ready=self._worker.ready is not None,
                queue_length=len(self._jobs),
                in_flight_job=in_flight.job_id if isinstance(in_flight, JobBatch) and in_flight.accepted else None,
                worker_pid=self._worker.pid,
                restarts=self._worker.restarts,
                completed=self._counters.completed,
                failed=self._counters.failed,
                worker=self._worker.ready,
                last_stats=figures.stats,
                last_heartbeat_age_s=figures.heartbeat_age_s(),
                load_error=self._worker.load_error,
                leak_warning=figures.leak_warning,
                profile_cache=figures.profile_cache,
                model_loaded=figures.model_loaded,
                worker_uptime_s=self._worker.uptime_s(),
                speed=self._counters.speed(),
                graphs=figures.graphs,
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

    def _stopping_now(self) -> bool:
        with self._lock:
            return self._stopping

    def _supervise(self) -> None:
        try:
            while not self._stopping_now():
                try:
                    self._step()
                except Exception:  # the supervisor must outlive any single bug; the worker is replaced
                    log.exception("supervisor step failed; replacing the worker")
                    if self._worker.handle is not None:
                        self._worker.handle.kill()
        finally:
            self._worker.stop(graceful=True)

    def _step(self) -> None:
        if not self._worker.alive():
            self._handle_dead_worker()
            return
        self._maybe_restart()
        self._dispatch_next()
        for message in self._worker.receive(0 if self._in_flight is None else POLL_S):
            self._handle_message(message)
        self._check_timeout()

    def _started(self) -> None:
        """After a start attempt: wake waiters; a failed start fails everything queued."""
        with self._lock:
            self._figures.heartbeat_at = time.monotonic() if self._worker.ready else 0.0
            self._start_attempts += 1
            self._lock.notify_all()
        if self._worker.ready is None and self._worker.load_error:
            self._fail_all(BackendLoadError(self._worker.load_error))

    def _handle_dead_worker(self) -> None:
        for message in self._worker.receive(0):  # what it sent before dying still counts (a batch-mate's result)
            self._handle_message(message)
        with self._lock:
            in_flight, self._in_flight = self._in_flight, None
        self._worker.forget_dead()
        failed, rerun = jobs.crash_outcome(in_flight)
        with self._lock:
            self._jobs.extendleft(reversed(rerun))
        for item in failed:
            self._finish(item, error=WorkerCrashedError())
        with self._lock:
            # After a failed start, wait for work (or a restart request) instead of spinning.
            while self._worker.load_error and not self._stopping and not self._wanted():
                self._lock.wait(1.0)
            if self._stopping:
                return
            restart, self._restart, self._retry_load = self._restart, None, False
        before, started = self._figures.stats, time.monotonic()
        self._worker.start(self._stopping_now)
        self._started()
        if restart is not None:
            self._resolve_restart(restart, 0, started, before, None)

    def _wanted(self) -> bool:
        """Something is waiting for a worker (caller holds the lock)."""
        return bool(self._jobs) or self._restart is not None or self._retry_load

    def _maybe_restart(self) -> None:
        with self._lock:
            restart = self._restart
            if restart is None or (self._in_flight is not None and not restart.force):
                return
            self._restart = None
            requeued = self._in_flight if isinstance(self._in_flight, JobBatch) else None
            if requeued is not None:
                self._jobs.extendleft(reversed(requeued.jobs))
            elif isinstance(self._in_flight, ControlCall):
                self._controls.appendleft(self._in_flight)
            graceful = self._in_flight is None
            self._in_flight = None
        old_pid, before, started = self._worker.pid, self._figures.stats, time.monotonic()
        self._worker.replace(graceful, self._stopping_now)
        self._started()
        self._resolve_restart(restart, old_pid, started, before, requeued.job_id if requeued else None)

    def _resolve_restart(
        self, restart: RestartCall, old_pid: int, started: float, before: AllocatorStats | None, requeued: str | None
    ) -> None:
        if self._worker.handle is None:
            restart.future.set_exception(BackendLoadError(self._worker.load_error))
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
        request = ControlRequest(ControlKind.STATS)
        self._worker.send(request)
        deadline = time.monotonic() + CONTROL_TIMEOUT_S
        while time.monotonic() < deadline and self._worker.alive():
            for message in self._worker.receive(POLL_S):
                if isinstance(message, ControlReply) and message.request_id == request.request_id:
                    assert isinstance(message.payload, AllocatorStats)
                    self._record_stats(message.payload)
                    return message.payload
                self._handle_message(message)
        return None

    def _dispatch_next(self) -> None:
        with self._lock:
            if self._in_flight is not None or self._worker.handle is None:
                return
            if not self._controls and not self._jobs:
                self._lock.wait(POLL_S)
            item: JobBatch | ControlCall | None = None
            if self._controls:
                item = self._controls.popleft()
                if not item.future.running() and not item.future.set_running_or_notify_cancel():
                    return  # cancelled by its caller while queued
            elif self._jobs:
                capabilities = self._worker.ready.capabilities if self._worker.ready else None
                if (hold := self._batcher.hold_s(self._jobs, capabilities, time.monotonic())) > 0:  # for company
                    self._lock.wait(hold)
                    return
                item = JobBatch.start(self._batcher.take(self._jobs, capabilities))
            if item is None:
                return
            self._in_flight, self._in_flight_since = item, time.monotonic()
        self._worker.send(item.request)

    def _handle_message(self, message: Any) -> None:
        in_flight = self._in_flight
        if isinstance(message, JobAccepted):
            if isinstance(in_flight, JobBatch) and in_flight.find(message.job_id) is not None:
                with self._lock:
                    in_flight.accepted.add(message.job_id)
        elif isinstance(message, ChunkReady):
            job = in_flight.find(message.job_id) if isinstance(in_flight, JobBatch) else None
            if job is not None:
                job.push(message)
        elif isinstance(message, Heartbeat):
            self._figures.record_heartbeat(message)
            self._record_stats(message.stats)
        elif isinstance(message, ControlReply) and message.request_id == AUTO_CLEAN_ID:
            log.info("the worker cleaned its cache between jobs")
        else:
            self._handle_reply(message)

    def _handle_reply(self, message: SynthesisResult | ControlReply | ErrorReply) -> None:
        in_flight = self._in_flight
        request_id = message.job_id if isinstance(message, SynthesisResult) else message.request_id
        with self._lock:  # a job's reply leaves the rest of its batch on the device
            item = in_flight.take(request_id) if isinstance(in_flight, JobBatch) else in_flight
            if in_flight is None or item is None or _request_id(item) != request_id:
                log.warning("dropping a reply for %s, which is not in flight", request_id)
                return
            if not isinstance(in_flight, JobBatch) or not in_flight.jobs:
                self._in_flight = None
                self._batcher.device_free(time.monotonic())
        if isinstance(message, ErrorReply):
            self._finish(item, error=error_from_name(message.error_type, message.message))
        elif isinstance(message, SynthesisResult):
            assert isinstance(item, Job)
            wait = self._in_flight_since - item.request.submitted_at
            self._finish(item, value=replace(message, queue_wait_s=wait))
        else:
            self._finish(item, value=message.payload)

    def _record_stats(self, stats: AllocatorStats) -> None:
        self._figures.stats = stats
        for listener in self._listeners:
            listener(stats)

    def _check_timeout(self) -> None:
        in_flight = self._in_flight
        if not isinstance(in_flight, JobBatch) or not self._worker.overdue(self._in_flight_since):
            return
        log.error("job %s timed out; replacing the worker", in_flight.job_id)
        with self._lock:
            self._in_flight = None
        if self._worker.handle is not None:
            self._worker.handle.kill()
        for job in in_flight.jobs:
            self._finish(job, error=jobs.timeout_error(self.settings.job_timeout_s))

    def _finish(self, item: Job | ControlCall, value: Any = None, error: VoiceLabError | None = None) -> None:
        future: Future[Any] = item if isinstance(item, Job) else item.future
        if isinstance(item, Job):
            self._counters.finished(value if error is None else None)
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def _control(self, request: ControlRequest) -> Any:
        future: Future[Any] = Future()
        with self._lock:
            if self._stopping:
                raise EngineStoppedError()
            if self._worker.load_error and self._worker.handle is None:
                raise BackendLoadError(self._worker.load_error)
            self._controls.append(ControlCall(request, future))
            self._lock.notify_all()
        return future.result(CONTROL_TIMEOUT_S + self.settings.job_timeout_s)

    def _fail_all(self, error: VoiceLabError) -> None:
        with self._lock:
            pending: list[Future[Any]] = [*self._jobs, *(c.future for c in self._controls)]
            self._jobs.clear()
            self._controls.clear()
        for future in pending:
            if not future.done():
                future.set_exception(type(error)(str(error)))


def _request_id(item: Job | ControlCall) -> str:
    return item.job_id if isinstance(item, Job) else item.request.request_id
