"""InprocClient: the same API as ``EngineClient`` with the engine core in this process (CLI, benchmarks, tests).

One thread runs jobs and controls one at a time from a bounded queue, exactly as the worker would, so a
front end is written once against ``voicelab.engine.api.Engine`` and works with either client. There is no
process to supervise: a soft restart reloads the core in place.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from voicelab.backends.base import AudioChunk
from voicelab.engine.core import EngineCore
from voicelab.engine.jobs import Job, busy_error, restart_reason, with_seed
from voicelab.engine.messages import (
    AllocatorStats,
    ChunkReady,
    CleanReport,
    SegmentSnapshot,
    SynthesisRequest,
    SynthesisResult,
    WorkerReady,
)
from voicelab.engine.status import EngineStatus, JobCounters, QueueView, RestartReport
from voicelab.errors import EngineStoppedError
from voicelab.settings import Settings

log = logging.getLogger(__name__)

_Work = tuple[Job | None, Callable[[], Any] | None, Future[Any] | None]


class InprocClient:
    """Loads the backend in this process on construction (the model is ready when it returns)."""

    def __init__(self, settings: Settings, core: EngineCore | None = None) -> None:
        self.settings = settings
        self.core = core or EngineCore(settings)
        self._queue: queue.Queue[_Work | None] = queue.Queue()
        self._lock = threading.Lock()
        self._waiting = 0
        self._queued: list[str] = []  # job ids waiting, next first (for queue_view)
        self._in_flight: str | None = None
        self._in_flight_text, self._in_flight_since = "", 0.0
        self._counters = JobCounters()
        self._restarts = 0
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._serve, name="voicelab-inproc", daemon=True)
        self._stopping = False
        self._thread.start()

    def submit(self, request: SynthesisRequest) -> Job:
        job = Job(with_seed(request))
        with self._lock:
            if self._stopping:
                raise EngineStoppedError()
            if self._waiting >= self.settings.queue_size:
                raise busy_error(self._waiting)
            self._waiting += 1
            self._queued.append(job.job_id)
        self._queue.put((job, None, None))
        return job

    def synthesize(self, request: SynthesisRequest, timeout: float | None = None) -> SynthesisResult:
        return self.submit(request).result(timeout)

    def clean_cache(self, clear_profiles: bool = False, *, worker: int | None = None) -> CleanReport:
        return self._call(lambda: self.core.clean_cache(clear_profiles))

    def memory_snapshot(self, *, worker: int | None = None) -> SegmentSnapshot:
        return self._call(self.core.snapshot)

    def allocator_stats(self) -> AllocatorStats:
        return self._call(self.core.stats)

    def soft_restart(
        self, force: bool = False, *, worker: int | None = None, backend: str | None = None
    ) -> RestartReport:
        """Reload the core between jobs (``force`` has nothing to interrupt in-process); ``backend``: load that one
        from now on (a backend that fails to load leaves the one before it loaded, and raises why)."""
        return self._call(lambda: self._reload(force, backend))

    def wait_ready(self, timeout: float = 0.0) -> WorkerReady:
        return self.core.ready_message()

    def status(self) -> EngineStatus:
        with self._lock:
            return EngineStatus(
                ready=True,
                queue_length=self._waiting,
                in_flight_job=self._in_flight,
                worker_pid=0,
                restarts=self._restarts,
                completed=self._counters.completed,
                failed=self._counters.failed,
                worker=self.core.ready_message(),
                last_stats=self.core.stats(),
                last_heartbeat_age_s=0.0,
                load_error=None,
                leak_warning=self.core.leak_warning,
                profile_cache=self.core.voice.cache_stats(),
                model_loaded=self.core.loaded,
                worker_uptime_s=time.monotonic() - self._started,
                speed=self._counters.speed(),
                graphs=self.core.graph_buckets(),
            )

    def queue_view(self) -> QueueView:
        with self._lock:
            running = self._in_flight is not None
            since = time.monotonic() - self._in_flight_since if running else 0.0
            return QueueView(self._in_flight_text if running else "", since, tuple(self._queued))

    def add_stats_listener(self, listener: Callable[[AllocatorStats], None]) -> None:
        """Accepted for API parity; figures are read on demand in-process."""

    def close(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._stopping = True
        self._queue.put(None)
        self._thread.join(timeout)
        self.core.close()

    def __enter__(self) -> InprocClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, fn: Callable[[], Any]) -> Any:
        future: Future[Any] = Future()
        self._queue.put((None, fn, future))
        return future.result()

    def _reload(self, force: bool, backend: str | None = None) -> RestartReport:
        before, started = self.core.stats(), time.monotonic()
        settings = self.settings if backend is None else replace(self.settings, backend=backend)
        self.core.close()
        try:
            self.core = EngineCore(settings)
        except Exception:
            self.core = EngineCore(self.settings)  # the one before, as it was
            raise
        self.settings = settings
        self._restarts += 1
        self._started = time.monotonic()
        after = self.core.stats()
        return RestartReport(0, 0, time.monotonic() - started, force, None, before, after, restart_reason(backend))

    def _serve(self) -> None:
        while (work := self._queue.get()) is not None:
            job, fn, future = work
            if job is not None:
                self._run(job)
            elif fn is not None and future is not None:
                try:
                    future.set_result(fn())
                except BaseException as exc:
                    future.set_exception(exc)

    def _run(self, job: Job) -> None:
        with self._lock:
            self._waiting -= 1
            self._queued.remove(job.job_id)
            self._in_flight = job.job_id
            self._in_flight_text, self._in_flight_since = job.request.text, time.monotonic()
        if not job.set_running_or_notify_cancel():
            return
        index = 0

        def emit(chunk: AudioChunk, elapsed_s: float) -> None:
            nonlocal index
            job.push(ChunkReady(job.job_id, index, chunk, elapsed_s))
            index += 1

        waited = time.monotonic() - job.request.submitted_at
        self.core.progress_sink = job.push
        try:
            result = self.core.run(job.request, emit)
            result = replace(result, queue_wait_s=waited)
            job.set_result(result)
            self._counters.finished(result)
        except BaseException as exc:
            self._counters.finished(None)
            job.set_exception(exc)
        finally:
            with self._lock:
                self._in_flight = None
        self.core.after_job()
