"""``ServeEngine``: the ``Engine`` the ingress's ``GenerationService`` calls, with the engine replicas of a Ray
Serve application behind it. Validation and History stay in the service; this only carries jobs and controls.

A job is one streamed request through the replicas' ``DeploymentHandle``, its voice (the prompt's content hash)
as Serve's multiplexed model id. Failure: a replica that dies before its worker accepted the job (it only waited
there) costs the job nothing, it is sent again once; after accepting, the job fails with one clear sentence
(``WorkerCrashedError``, HTTP 503), as the job in flight does when a worker dies on one host. Serve's handle
queue past ``max_queued_requests`` answers busy (``EngineBusyError``, HTTP 429). Status is read from the
board the replicas report to, shown as one worker per replica slot (the panel's tabs).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, RayActorError
from ray.serve.exceptions import BackPressureError
from ray.serve.handle import DeploymentHandle

from voicelab.cluster.board import ReplicaReport
from voicelab.cluster.replica import ControlCommand, ReplicaEvent
from voicelab.cluster.router import replica_key
from voicelab.engine.jobs import Job, busy_error, with_seed
from voicelab.engine.messages import (
    AllocatorStats,
    ChunkReady,
    CleanReport,
    ErrorReply,
    JobAccepted,
    SegmentSnapshot,
    SynthesisRequest,
    SynthesisResult,
    WorkerReady,
)
from voicelab.engine.status import (
    EngineStatus,
    JobCounters,
    QueueView,
    RestartReport,
    WorkerStatus,
    combine_cleans,
    combine_restarts,
    engine_status,
)
from voicelab.errors import (
    BackendLoadError,
    EngineChoiceError,
    InvalidSettingError,
    VoiceLabError,
    WorkerCrashedError,
    error_from_name,
)
from voicelab.settings import Settings

log = logging.getLogger(__name__)

REPLICA_LOST = (
    "The replica running this request stopped unexpectedly; Ray Serve is starting a new one. Please try again."
)
POLL_S = 1.0
CONTROL_TIMEOUT_S = 120.0
REPLICA_GONE = (RayActorError, ActorUnavailableError)


def missing_worker(index: int, state: str) -> WorkerStatus:
    """A replica slot with no replica reporting (starting, or replaced after a death)."""
    return WorkerStatus(
        index=index, device="replica", state=state, pid=0, in_flight_jobs=(), completed=0, failed=0, restarts=0,
        start_deaths=0, worker=None, last_stats=None, last_heartbeat_age_s=None, load_error=None, leak_warning=None,
        profile_cache=None, model_loaded=False, uptime_s=None, name=f"replica {index}",
    )  # fmt: skip


def replica_worker(index: int, report: ReplicaReport) -> WorkerStatus:
    """A replica's one worker as a slot of the panel: named by slot, node and device, its GPU's VRAM."""
    engine = report.engine
    base = engine.workers[0] if engine.workers else missing_worker(index, "starting")
    device = engine.worker.device if engine.worker else base.device
    name = f"replica {index} · {report.node} · {device}"
    return replace(base, index=index, name=name, vram=report.vram)


class ReplicaSlots:
    """Replica ids kept on stable slot numbers: a replacement takes the slot its dead predecessor left."""

    def __init__(self, count: int) -> None:
        self.count = max(count, 1)
        self._ids: list[str | None] = [None] * self.count

    def assign(self, reports: Sequence[ReplicaReport]) -> list[tuple[int, ReplicaReport | None]]:
        live = {r.replica_id: r for r in reports}
        self._ids = [rid if rid in live else None for rid in self._ids]
        for rid in live:
            if rid not in self._ids and None in self._ids:
                self._ids[self._ids.index(None)] = rid
        return [(i, live[rid] if rid is not None else None) for i, rid in enumerate(self._ids)]

    def replica_of(self, index: int) -> str:
        if not 0 <= index < self.count:
            raise InvalidSettingError(f"There is no replica {index}; this deployment has {self.count}.")
        rid = self._ids[index]
        if rid is None:
            raise WorkerCrashedError(f"Replica {index} is not running now; Ray Serve is starting it.")
        return rid


class ServeEngine:
    """Thread-safe: each submitted job is carried by its own thread; status is the board's, refreshed each second."""

    def __init__(
        self, handle: DeploymentHandle, board: Any, settings: Settings, slots: int, dashboard_url: str = ""
    ) -> None:
        self.settings = settings
        self.dashboard_url = dashboard_url
        self._handle, self._board = handle, board
        self._slots = ReplicaSlots(slots)
        self._lock = threading.Lock()
        self._waiting: dict[str, Job] = {}  # submitted, not yet accepted by a replica's worker, in order
        self._running: dict[str, Job] = {}
        self._counters = JobCounters()
        self._listeners: list[Callable[[AllocatorStats], None]] = []
        self._reports: list[tuple[int, ReplicaReport | None]] = self._slots.assign([])
        self._seen: set[int] = set()
        self._stop = threading.Event()
        self._refresh()
        threading.Thread(target=self._poll, name="voicelab-board-poll", daemon=True).start()

    # ---- jobs ----

    def submit(self, request: SynthesisRequest) -> Job:
        job = Job(with_seed(request))
        with self._lock:
            self._waiting[job.job_id] = job
        threading.Thread(target=self._carry, args=(job,), name=f"voicelab-job-{job.job_id}", daemon=True).start()
        return job

    def _carry(self, job: Job) -> None:
        """Run the job on a replica; once more elsewhere if its replica died before its worker accepted it."""
        for attempt in (1, 2):
            accepted = threading.Event()
            try:
                outcome = self._stream(job, accepted)
            except BackPressureError as exc:
                outcome = busy_error(int(exc.args[0]) if exc.args else self.settings.queue_size)
            except REPLICA_GONE as exc:
                if not accepted.is_set() and attempt == 1:
                    log.warning("job %s: its replica went away before starting it; sent again", job.job_id)
                    continue
                log.warning("job %s failed: its replica went away (%s)", job.job_id, type(exc).__name__)
                outcome = WorkerCrashedError(REPLICA_LOST)
            except Exception as exc:  # a Ray failure of any other kind is still one sentence to the user
                log.exception("job %s failed in the cluster", job.job_id)
                outcome = WorkerCrashedError(f"{REPLICA_LOST} ({type(exc).__name__})")
            self._finish(job, outcome)
            return

    def _stream(self, job: Job, accepted: threading.Event) -> SynthesisResult | VoiceLabError:
        voice = job.request.prompt.sha256 if job.request.prompt is not None else ""
        options = self._handle.options(stream=True, multiplexed_model_id=voice)
        events: Any = options.synthesize.remote(job.request)
        for event in events:
            if self._handled(job, event, accepted):
                continue
            if isinstance(event, SynthesisResult):
                return event
            if isinstance(event, ErrorReply):
                return error_from_name(event.error_type, event.message)
        raise RayActorError()  # the stream ended with no answer: its replica was stopped

    def _handled(self, job: Job, event: ReplicaEvent, accepted: threading.Event) -> bool:
        if isinstance(event, JobAccepted):
            accepted.set()
            with self._lock:
                self._waiting.pop(job.job_id, None)
                self._running[job.job_id] = job
            if not job.running():
                job.set_running_or_notify_cancel()
            return True
        if isinstance(event, ChunkReady):
            job.push(event)
            return True
        return False

    def _finish(self, job: Job, outcome: SynthesisResult | VoiceLabError) -> None:
        with self._lock:
            self._waiting.pop(job.job_id, None)
            self._running.pop(job.job_id, None)
            self._counters.finished(outcome if isinstance(outcome, SynthesisResult) else None)
        if job.done():
            return
        if isinstance(outcome, SynthesisResult):
            job.set_result(outcome)
        else:
            job.set_exception(outcome)

    # ---- controls: one replica (``worker=`` its slot) or all ----

    def _control(self, index: int, command: ControlCommand) -> Any:
        rid = self._slots.replica_of(index)
        call = self._handle.options(multiplexed_model_id=replica_key(rid)).control.remote(command)
        try:
            return call.result(timeout_s=CONTROL_TIMEOUT_S)
        except REPLICA_GONE as exc:
            raise WorkerCrashedError(f"Replica {index} stopped; Ray Serve is starting a new one.") from exc

    def _live(self, worker: int | None) -> list[int]:
        if worker is not None:
            return [worker]
        live = [index for index, report in self._reports if report is not None]
        if not live:
            raise BackendLoadError("No replica is running yet; Ray Serve is starting them.")
        return live

    def clean_cache(self, clear_profiles: bool = False, *, worker: int | None = None) -> CleanReport:
        command = ControlCommand("clean", clear_profiles=clear_profiles)
        reports = [self._control(index, command) for index in self._live(worker)]
        return reports[0] if len(reports) == 1 else combine_cleans(reports)

    def soft_restart(
        self, force: bool = False, *, worker: int | None = None, backend: str | None = None
    ) -> RestartReport:
        """One replica's worker, or every replica's one after another (the others keep serving); the replicas'
        backend is the one the cluster was deployed with (``backend`` is refused)."""
        if backend is not None:
            raise EngineChoiceError("On a Ray cluster the voice engine is chosen when it is deployed (--backend).")
        command = ControlCommand("restart", force=force)
        reports = [replace(self._control(i, command), device=f"replica {i}") for i in self._live(worker)]
        return reports[0] if len(reports) == 1 else combine_restarts(reports)

    def memory_snapshot(self, *, worker: int | None = None) -> SegmentSnapshot:
        snapshot: SegmentSnapshot = self._control(self._live(worker)[0], ControlCommand("snapshot"))
        return snapshot

    # ---- state ----

    def _refresh(self) -> None:
        try:
            reports: list[ReplicaReport] = ray.get(self._board.reports.remote(), timeout=POLL_S * 5)
        except (ray.exceptions.GetTimeoutError, RayActorError) as exc:
            log.warning("the replica board did not answer: %s", exc)
            return
        assigned = self._slots.assign(reports)
        with self._lock:
            self._reports = assigned
            self._seen.update(index for index, report in assigned if report is not None)

    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            self._refresh()
            stats = self.status().last_stats
            if stats is not None:
                for listener in self._listeners:
                    listener(stats)

    def status(self) -> EngineStatus:
        with self._lock:
            workers = [
                replica_worker(i, r)
                if r is not None
                else missing_worker(i, "restarting" if i in self._seen else "starting")
                for i, r in self._reports
            ]
            queued = len(self._waiting)
            return replace(engine_status(workers, queued, self._counters), dashboard_url=self.dashboard_url)

    def queue_view(self) -> QueueView:
        with self._lock:
            running = next(iter(self._running.values()), None)
            since = running.request.submitted_at if running is not None else 0.0
            no_replica = all(report is None for _, report in self._reports)
            return QueueView.of(running, since, list(self._waiting.values()), no_replica)

    def wait_ready(self, timeout: float = 300.0) -> WorkerReady:
        """The first ready replica's READY; the load error once every replica reported one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._stop.is_set():
            status = self.status()
            if status.ready and status.worker is not None:
                return status.worker
            if status.workers and all(w.load_error for w in status.workers):
                raise BackendLoadError(status.load_error)
            time.sleep(0.2)
            self._refresh()
        raise TimeoutError("no engine replica became ready in time")

    def add_stats_listener(self, listener: Callable[[AllocatorStats], None]) -> None:
        self._listeners.append(listener)

    def close(self, timeout: float = 10.0) -> None:
        self._stop.set()
