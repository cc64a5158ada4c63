"""The jobs every worker shares: one bounded queue, one lock, the job counters and the wait for a healthy worker.

Workers pull from it: a worker with room takes the first queued job that routing places on it (``take_for``),
so a job is never tied to a device before one can run it, and a worker that crashes or restarts hands its
unstarted jobs back to the head of the queue (``requeue``) for the others. Every job that ends is counted
once, here, whichever way it ends.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from voicelab.engine.jobs import ControlCall, Job, busy_error
from voicelab.engine.messages import SynthesisRequest
from voicelab.engine.routing import WorkerLoad, choose_worker
from voicelab.engine.status import JobCounters
from voicelab.errors import BackendLoadError, EngineStoppedError, VoiceLabError
from voicelab.settings import Settings

LoadsOf = Callable[[SynthesisRequest], Sequence[WorkerLoad]]
TakeJobs = Callable[[deque[Job]], list[Job]]


def take_first(routed: deque[Job]) -> list[Job]:
    return [routed.popleft()]


def no_worker_error(waited_s: float) -> BackendLoadError:
    return BackendLoadError(
        f"No engine worker became ready within {waited_s:.0f} s, so the job was not run. Please try again later."
    )


class JobPool:
    """Shared by the client (submit, status) and every worker slot's thread; ``lock`` guards all of it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.lock = threading.Condition()
        self.jobs: deque[Job] = deque()
        self.stopping = False
        self.counters = JobCounters()
        self.loads: LoadsOf = lambda request: ()
        self.anyone_healthy: Callable[[], bool] = lambda: True  # some worker can take a job now
        self.no_device_can_load: Callable[[], bool] = lambda: True  # every worker failed to load, none is trying
        self._no_worker_since: float | None = None

    def stopping_now(self) -> bool:
        with self.lock:
            return self.stopping

    def submit(self, job: Job) -> None:
        with self.lock:
            if self.stopping:
                raise EngineStoppedError()
            if len(self.jobs) >= self.settings.queue_size:
                raise busy_error(len(self.jobs))
            self.jobs.append(job)
            self.lock.notify_all()

    def take_for(self, index: int, take: TakeJobs | None = None) -> list[Job]:
        """The queued jobs worker ``index`` runs next (caller holds the lock; the worker has room).

        ``take`` picks from the jobs routing places on this worker, in queue order, popping what it runs: the
        first one by default; a micro-batcher may take several compatible ones to send as one batch.
        """
        routed = self.routed_for(index)
        chosen = (take or take_first)(routed) if routed else []
        started = []
        for job in chosen:
            self.jobs.remove(job)
            if job.running() or job.set_running_or_notify_cancel():  # else cancelled by its caller while queued
                started.append(job)
        return started

    def routed_for(self, index: int) -> deque[Job]:
        """The queued jobs routing places on worker ``index`` now, in queue order (caller holds the lock)."""
        return deque(job for job in self.jobs if choose_worker(self.loads(job.request)) == index)

    def requeue(self, jobs: Sequence[Job]) -> None:
        """Jobs a worker had not started go back to the head of the queue, in their order."""
        with self.lock:
            self.jobs.extendleft(reversed(jobs))
            self.lock.notify_all()

    def finish(self, item: Job | ControlCall, value: Any = None, error: VoiceLabError | None = None) -> None:
        future: Future[Any] = item if isinstance(item, Job) else item.future
        if future.done():  # cancelled by its caller: not an outcome to count
            return
        if isinstance(item, Job):
            with self.lock:
                self.counters.finished(value if error is None else None)
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def fail_queued(self, error: VoiceLabError, older_than: float | None = None) -> None:
        """Fail queued jobs (those submitted before ``older_than``, monotonic, when given), each counted."""
        with self.lock:
            doomed = [j for j in self.jobs if older_than is None or j.request.submitted_at < older_than]
            for job in doomed:
                self.jobs.remove(job)
        for job in doomed:
            self.finish(job, error=type(error)(str(error)))

    def expire_waiting(self) -> None:
        """Fail jobs that waited ``worker_wait_s`` with no healthy worker to run them (one sentence each)."""
        bound = self.settings.worker_wait_s
        with self.lock:
            if self.anyone_healthy():
                self._no_worker_since = None
                return
            now = time.monotonic()
            if self._no_worker_since is None:
                self._no_worker_since = now
            # A job submitted while there was a worker waits the whole bound from the moment the last one went.
            cutoff = now - bound if now - self._no_worker_since >= bound else None
        if cutoff is not None and self.jobs:
            self.fail_queued(no_worker_error(bound), older_than=cutoff)

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
            self.lock.notify_all()
        self.fail_queued(EngineStoppedError())
