"""One device's worker as the client runs it: its own thread, supervisor, heartbeat figures, controls and restart.

The thread pulls jobs from the shared ``JobPool`` while its worker is healthy, routes the worker's chunks and
replies back to each caller and runs this device's controls between jobs. A crash, a timeout or a restart here
touches only this device's jobs: the one the worker had accepted fails (or, when forced, runs again); the ones
it had not started go back to the shared queue, where the other devices take them.

Each slot micro-batches (``engine.microbatch``): it takes the compatible jobs routed to it, in queue order, and
sends them as one batch; after a crash its unanswered batch-mates run again alone, a timeout fails the batch.
A backend with ``concurrent_jobs`` > 1 gets new jobs while others run (a queued control stops that to drain).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from voicelab.backends.base import Capabilities
from voicelab.engine.jobs import ControlCall, Job, RestartCall, after_crash, batch_message, timeout_error
from voicelab.engine.messages import (
    AllocatorStats,
    ChunkReady,
    ControlKind,
    ControlReply,
    ControlRequest,
    ErrorReply,
    Heartbeat,
    JobAccepted,
    JobProgress,
    SynthesisResult,
)
from voicelab.engine.microbatch import MicroBatcher, has_room, job_limit, limits_from
from voicelab.engine.pool import JobPool, TakeJobs
from voicelab.engine.proc import WorkerHandle
from voicelab.engine.routing import ProfileMirror, WorkerLoad
from voicelab.engine.status import RestartReport, WorkerFigures, WorkerStatus
from voicelab.engine.supervisor import BACKOFF_MAX_S, POLL_S, WorkerSupervisor
from voicelab.errors import BackendLoadError, VoiceLabError, WorkerCrashedError, error_from_name
from voicelab.settings import Settings

log = logging.getLogger(__name__)

AUTO_CLEAN_ID = "auto-clean"
GAVE_UP_PAUSE_S = 60.0  # a device whose new workers kept dying tries again after this, work waiting or not


@dataclass
class InFlight:
    job: Job
    sent_at: float
    accepted_at: float = 0.0


class WorkerSlot:
    """A device and its worker process; every method but the public reads runs on the slot's own thread."""

    def __init__(
        self,
        index: int,
        settings: Settings,
        pool: JobPool,
        spawn: Callable[[Settings], WorkerHandle],
        on_stats: Callable[[WorkerSlot, AllocatorStats], None],
    ) -> None:
        self.index, self.settings, self.pool = index, settings, pool
        self.device = settings.device
        self.supervisor = WorkerSupervisor(settings, spawn)
        self.figures = WorkerFigures()
        self.profiles = ProfileMirror(settings.profile_cache_size)
        self.in_flight: dict[str, InFlight] = {}
        self.control: ControlCall | None = None
        self.controls: deque[ControlCall] = deque()
        self.restart: RestartCall | None = None
        self.start_attempts = 0
        self.retry_load = False  # wait_ready or a restart asks for another load attempt after a failed one
        self.completed = self.failed = 0
        self.last_dispatch = 0.0
        self._gave_up_at = 0.0
        self._on_stats = on_stats
        # Micro-batching: which routed jobs go at once, and the message that sends them.
        self.batcher = MicroBatcher(limits_from(settings))
        self.take: TakeJobs = lambda routed: self.batcher.take(routed, self.capabilities(), len(self.in_flight))
        self.message_for: Callable[[list[Job]], Any] = batch_message
        self.thread = threading.Thread(target=self._run, name=f"voicelab-worker-{index}", daemon=True)

    # ---- reads (any thread, under the pool's lock) ----

    @property
    def healthy(self) -> bool:
        """Ready for work: a worker is up and no restart is pending on it."""
        return self.supervisor.ready is not None and self.restart is None

    @property
    def failed_to_load(self) -> bool:
        """Its last start failed and it is not trying again right now."""
        sup = self.supervisor
        return sup.handle is None and not sup.trying and bool(sup.load_error)

    def load_for(self, prompt_sha: str | None) -> WorkerLoad:
        return WorkerLoad(
            index=self.index,
            healthy=self.healthy and self.control is None,
            busy=len(self.in_flight),
            capacity=job_limit(self.capabilities()),
            holds_profile=self.profiles.holds(prompt_sha),
            last_dispatch=self.last_dispatch,
        )

    def capabilities(self) -> Capabilities | None:
        return self.supervisor.ready.capabilities if self.supervisor.ready is not None else None

    def state(self) -> str:
        if self.restart is not None and self.supervisor.ready is not None:
            return "restarting"
        if self.supervisor.ready is not None:
            return "ready"
        return "failed" if self.failed_to_load else "starting"

    def status(self) -> WorkerStatus:
        sup, figures = self.supervisor, self.figures
        accepted = tuple(job_id for job_id, f in self.in_flight.items() if f.accepted_at)
        return WorkerStatus(
            index=self.index,
            device=self.device,
            state=self.state(),
            pid=sup.pid or sup.starting_pid,
            in_flight_jobs=accepted,
            completed=self.completed,
            failed=self.failed,
            restarts=sup.restarts,
            start_deaths=sup.start_deaths,
            worker=sup.ready,
            last_stats=figures.stats,
            last_heartbeat_age_s=figures.heartbeat_age_s(),
            load_error=None if sup.ready else sup.load_error,
            leak_warning=figures.leak_warning,
            profile_cache=figures.profile_cache,
            model_loaded=figures.model_loaded,
            uptime_s=sup.uptime_s(),
            graphs=figures.graphs,
        )

    def wanted(self) -> bool:
        """A failed worker tries again: asked to, or work waits that no other device can run, or after a pause."""
        if self.restart is not None or self.retry_load or self.controls:
            return True
        stranded = bool(self.pool.jobs) and not self.pool.anyone_healthy()
        if not self.supervisor.kept_dying:
            return stranded
        return time.monotonic() - self._gave_up_at > (BACKOFF_MAX_S if stranded else GAVE_UP_PAUSE_S)

    # ---- the slot's thread ----

    def _run(self) -> None:
        try:
            while not self.pool.stopping_now():
                try:
                    self._step()
                except Exception:  # the thread must outlive any single bug; the worker is replaced
                    log.exception("worker slot %d step failed; replacing its worker", self.index)
                    if self.supervisor.handle is not None:
                        self.supervisor.handle.kill()
        finally:
            self.supervisor.stop(graceful=True)

    def _tick(self) -> bool:
        """Called every poll while a worker starts: queued jobs keep their bounded wait; True to stop."""
        self.pool.expire_waiting()
        return self.pool.stopping_now()

    def _step(self) -> None:
        self.pool.expire_waiting()
        if not self.supervisor.alive():
            self._handle_dead()
            return
        self._maybe_restart()
        self._dispatch_next()
        busy = bool(self.in_flight) or self.control is not None
        for message in self.supervisor.receive(POLL_S if busy else 0):
            self._handle_message(message)
        self._check_timeout()

    def _started(self) -> None:
        """After a start attempt: wake waiters; when no device can load the model, fail what is queued."""
        sup = self.supervisor
        with self.pool.lock:
            self.figures.heartbeat_at = time.monotonic() if sup.ready else 0.0
            self.start_attempts += 1
            self._gave_up_at = time.monotonic() if sup.kept_dying else 0.0
            self.pool.lock.notify_all()
        if sup.ready is None and sup.load_error and not sup.kept_dying and self.pool.no_device_can_load():
            self.pool.fail_queued(BackendLoadError(sup.load_error))

    def _handle_dead(self) -> None:
        for message in self.supervisor.receive(0):  # what it sent before dying still counts (a batch-mate's result)
            self._handle_message(message)
        with self.pool.lock:
            flights, self.in_flight = list(self.in_flight.values()), {}
            control, self.control = self.control, None
            self.profiles.clear()
        self.supervisor.forget_dead()
        failed, rerun = after_crash([f.job for f in flights if f.accepted_at])
        self.pool.requeue([*rerun, *(f.job for f in flights if not f.accepted_at)])  # never started here: anywhere
        for job in failed:
            self._finish(job, error=WorkerCrashedError())
        if control is not None:
            self._finish(control, error=WorkerCrashedError())
        with self.pool.lock:
            # After a failed start, wait for a reason to try again instead of spinning.
            while self.supervisor.load_error and not self.pool.stopping and not self.wanted():
                self.pool.lock.wait(1.0)
                self.pool.expire_waiting()
            if self.pool.stopping:
                return
            restart, self.restart, self.retry_load = self.restart, None, False
        before, started = self.figures.stats, time.monotonic()
        self.supervisor.start(self._tick, restart.backend if restart is not None else None)
        self._started()
        if restart is not None:
            self._resolve_restart(restart, 0, started, before, None)

    def _maybe_restart(self) -> None:
        with self.pool.lock:
            restart = self.restart
            busy = bool(self.in_flight) or self.control is not None
            if restart is None or (busy and not restart.force):
                return
            requeued = [f.job for f in self.in_flight.values()]
            self.in_flight = {}
            if self.control is not None:
                self.controls.appendleft(self.control)
                self.control = None
            self.profiles.clear()
        self.pool.requeue(requeued)
        old_pid, before, started = self.supervisor.pid, self.figures.stats, time.monotonic()
        self.supervisor.replace(not busy, self._tick, restart.backend)
        self._started()
        self._resolve_restart(restart, old_pid, started, before, requeued[0].job_id if requeued else None)

    def _resolve_restart(
        self, restart: RestartCall, old_pid: int, started: float, before: AllocatorStats | None, requeued: str | None
    ) -> None:
        after = self.supervisor.ask_stats(self._handle_message) if self.supervisor.handle is not None else None
        if after is not None:
            self._record_stats(after)
        with self.pool.lock:  # healthy again only now: until here this thread could not have taken a job
            if self.restart is restart:
                self.restart = None
            self.pool.lock.notify_all()
        if self.supervisor.handle is None:
            restart.future.set_exception(BackendLoadError(self.supervisor.load_error))
            return
        restart.future.set_result(
            RestartReport(
                old_pid=old_pid,
                new_pid=self.supervisor.pid,
                time_to_ready_s=time.monotonic() - started,
                forced=restart.force,
                requeued_job=requeued,
                before=before,
                after=after,
                reason=restart.reason,
                device=self.status().label,
            )
        )

    def _dispatch_next(self) -> None:
        with self.pool.lock:
            if self.supervisor.handle is None or (self.restart is not None and not self.in_flight):
                return
            message: Any = None
            if self.control is None and not self.in_flight and self.controls:
                self.control = self.controls.popleft()
                if not self.control.future.set_running_or_notify_cancel():
                    self.control = None
                    return
                message = self.control.request
            elif self.control is None and self.restart is None and self._takes_jobs():
                routed, now = self.pool.routed_for(self.index), time.monotonic()
                if not self.in_flight and (hold := self.batcher.hold_s(routed, self.capabilities(), now)) > 0:
                    self.pool.lock.wait(hold)  # a moment for company; a job joining running ones never waits
                    return
                jobs = self.pool.take_for(self.index, self.take)
                for job in jobs:
                    self._place(job)
                message = self.message_for(jobs) if jobs else None
            if message is None:
                if not self.in_flight and self.control is None:
                    self.pool.lock.wait(POLL_S)
                return
        self.supervisor.send(message)

    def _takes_jobs(self) -> bool:  # room for more, and no control waiting for the running jobs to drain
        return has_room(self.capabilities(), len(self.in_flight)) and not self.controls

    def _place(self, job: Job) -> None:
        """Record a job as sent to this worker (caller holds the lock)."""
        now = time.monotonic()
        self.in_flight[job.job_id] = InFlight(job, now)
        self.last_dispatch = now
        if job.request.prompt is not None:
            self.profiles.touch(job.request.prompt.sha256)

    def _handle_message(self, message: Any) -> None:
        if isinstance(message, JobAccepted):
            flight = self.in_flight.get(message.job_id)
            if flight is not None:
                with self.pool.lock:
                    flight.accepted_at = time.monotonic()
        elif isinstance(message, (ChunkReady, JobProgress)):
            flight = self.in_flight.get(message.job_id)
            if flight is not None:
                flight.job.push(message)
        elif isinstance(message, Heartbeat):
            self.figures.record_heartbeat(message)
            self._record_stats(message.stats)
        elif isinstance(message, ControlReply) and message.request_id == AUTO_CLEAN_ID:
            log.info("the worker on %s cleaned its cache between jobs", self.device)
        else:
            self._handle_reply(message)

    def _handle_reply(self, message: SynthesisResult | ControlReply | ErrorReply) -> None:
        request_id = message.job_id if isinstance(message, SynthesisResult) else message.request_id
        with self.pool.lock:
            flight = self.in_flight.pop(request_id, None)
            if flight is not None and not self.in_flight:  # the last of its batch: the device is free
                self.batcher.device_free(time.monotonic())
            control = None
            if flight is None and self.control is not None and self.control.request.request_id == request_id:
                control, self.control = self.control, None
        item: Job | ControlCall | None = flight.job if flight is not None else control
        if item is None:
            log.warning("dropping a reply for %s, which is not in flight on %s", request_id, self.device)
        elif isinstance(message, ErrorReply):
            self._finish(item, error=error_from_name(message.error_type, message.message))
        elif isinstance(message, SynthesisResult) and flight is not None:
            wait = flight.sent_at - flight.job.request.submitted_at
            self._finish(item, value=replace(message, queue_wait_s=wait))
        elif isinstance(message, ControlReply) and control is not None:
            if control.request.kind is ControlKind.CLEAN_CACHE and control.request.clear_profiles:
                with self.pool.lock:
                    self.profiles.clear()
            self._finish(item, value=message.payload)

    def _record_stats(self, stats: AllocatorStats) -> None:
        self.figures.stats = stats
        self._on_stats(self, stats)

    def _check_timeout(self) -> None:
        late = {f.job.job_id for f in self.in_flight.values() if self.supervisor.overdue(f.accepted_at or f.sent_at)}
        if not late:
            return
        log.error("job %s timed out on %s; replacing the worker", min(late), self.device)
        with self.pool.lock:  # the worker is killed: its batch stops with it; jobs beside it (concurrent) run again
            flights, self.in_flight = list(self.in_flight.values()), {}
        if self.supervisor.handle is not None:
            self.supervisor.handle.kill()
        self.pool.requeue([f.job for f in flights if f.job.job_id not in late])
        for flight in (f for f in flights if f.job.job_id in late):
            self._finish(flight.job, error=timeout_error(self.settings.job_timeout_s))

    def _finish(self, item: Job | ControlCall, value: Any = None, error: VoiceLabError | None = None) -> None:
        if isinstance(item, Job) and not item.done():
            with self.pool.lock:
                if error is None:
                    self.completed += 1
                else:
                    self.failed += 1
        self.pool.finish(item, value, error)

    # ---- requests from the client (any thread) ----

    def call(self, request: ControlRequest) -> Future[Any]:
        """Queue a control for this worker; it runs between jobs."""
        future: Future[Any] = Future()
        with self.pool.lock:
            if self.failed_to_load and self.supervisor.ready is None:
                raise BackendLoadError(self.supervisor.load_error)
            self.controls.append(ControlCall(request, future))
            self.pool.lock.notify_all()
        return future

    def abandon(self, error: VoiceLabError) -> None:
        """At close, after the thread ended: whatever this worker still had ends with ``error``."""
        with self.pool.lock:
            flights, self.in_flight = list(self.in_flight.values()), {}
            calls = [c for c in (self.control, *self.controls) if c is not None]
            self.control, self.controls = None, deque()
            restart, self.restart = self.restart, None
        items: list[Job | ControlCall] = [*(f.job for f in flights), *calls]
        for item in items:
            self._finish(item, error=type(error)(str(error)))
        if restart is not None and not restart.future.done():
            restart.future.set_exception(type(error)(str(error)))
