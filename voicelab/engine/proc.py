"""The worker process: spawn, READY handshake, a pipe, a heartbeat thread around EngineCore.

Nothing here touches the model directly; EngineCore does. A ``SynthesisBatch`` runs as one padded batch;
each of its jobs is acknowledged, streamed and answered under its own id. The worker is *spawned* (never forked) so it
starts with a clean CUDA state and can be replaced without restarting the UI.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing as mp
import os
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

from voicelab.backends.base import AudioChunk
from voicelab.backends.threaded import ReusedThreads
from voicelab.engine.memory import use_device_in_this_thread
from voicelab.engine.messages import (
    ChunkReady,
    ControlKind,
    ControlReply,
    ControlRequest,
    ErrorReply,
    Heartbeat,
    JobAccepted,
    SynthesisBatch,
    SynthesisRequest,
    SynthesisResult,
)
from voicelab.errors import VoiceLabError
from voicelab.settings import Settings

if TYPE_CHECKING:
    from voicelab.engine.core import EngineCore

log = logging.getLogger(__name__)

HEARTBEAT_S = 1.0


class _Sender:
    """The pipe is written from the job loop and the heartbeat thread; one lock keeps messages whole."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def send(self, message: Any) -> None:
        with self._lock:
            self._conn.send(message)


def _heartbeat_loop(core: EngineCore, sender: _Sender, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_S):
        try:
            sender.send(
                Heartbeat(
                    stats=core.stats(),
                    leak_warning=core.leak_warning,
                    model_loaded=core.loaded,
                    profile_cache=core.voice.cache_stats(),
                    graphs=core.graph_buckets(),
                )
            )
        except (OSError, EOFError, BrokenPipeError):
            return


def _reply_error(request_id: str, exc: BaseException) -> ErrorReply:
    if isinstance(exc, VoiceLabError):
        return ErrorReply(request_id, type(exc).__name__, str(exc))
    log.exception("unexpected error in worker")
    return ErrorReply(request_id, "VoiceLabError", f"Generation failed unexpectedly ({type(exc).__name__}: {exc}).")


def worker_main(conn: Connection, settings: Settings) -> None:
    """Entry point of the spawned process."""
    logging.basicConfig(level=os.environ.get("VOICELAB_LOG_LEVEL", "WARNING"))
    # Idle OpenMP threads must sleep, not spin: on a small shared CPU spinning steals the cores the
    # job needs. Read once when torch loads, so it is set before the import below.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from voicelab.engine.memory import configure_allocator

    configure_allocator(os.environ)  # before torch initialises CUDA
    from voicelab.engine.core import EngineCore

    sender = _Sender(conn)
    try:
        core = EngineCore(settings)
    except BaseException as exc:  # the UI must learn why the worker could not start
        sender.send(_reply_error("startup", exc))
        return
    sender.send(core.ready_message())
    core.progress_sink = sender.send  # a fit's progress goes out as it happens, tagged with its job
    stop = threading.Event()
    threading.Thread(target=_heartbeat_loop, args=(core, sender, stop), daemon=True).start()
    try:
        _serve(conn, core, sender)
    finally:
        stop.set()
        core.close()


class _JobRunner:
    """Runs each job message: in the serving loop, one at a time, or (a backend with ``concurrent_jobs`` > 1) on
    one of that many reused threads, so later jobs join while earlier ones run. The between-job hygiene runs when
    no job is left running, before another may start; a control waits until then (the client also sends none
    meanwhile).

    Reused, not a new thread per job (``ReusedThreads``): PyTorch keeps cuDNN's execution plans per thread."""

    def __init__(self, core: EngineCore, sender: _Sender) -> None:
        self.core, self.sender = core, sender
        workers = core.capabilities.concurrent_jobs
        setup = functools.partial(use_device_in_this_thread, core.device)
        self.threads = ReusedThreads("voicelab-job", setup) if workers > 1 else None
        self.running = 0
        self.idle = threading.Condition()

    def submit(self, requests: tuple[SynthesisRequest, ...]) -> None:
        if self.threads is None:
            _run_jobs(self.core, self.sender, requests)
            self._after_jobs()
            return
        with self.idle:
            self.running += 1
        self.threads.run(functools.partial(self._run, requests))

    def _run(self, requests: tuple[SynthesisRequest, ...]) -> None:
        try:
            _run_jobs(self.core, self.sender, requests)
        finally:
            with self.idle:
                self.running -= 1
                if self.running == 0:
                    self._after_jobs()  # under the condition: no job starts until it is done
                self.idle.notify_all()

    def drain(self) -> None:
        with self.idle:
            self.idle.wait_for(lambda: self.running == 0)

    def _after_jobs(self) -> None:
        report = self.core.after_job()
        if report is not None:
            self.sender.send(ControlReply("auto-clean", report))


def _serve(conn: Connection, core: EngineCore, sender: _Sender) -> None:
    idle_s = core.settings.idle_offload_minutes * 60
    runner = _JobRunner(core, sender)
    while True:
        try:
            if idle_s > 0 and core.loaded and runner.running == 0 and not conn.poll(idle_s):
                core.offload()  # no job can have started meanwhile: only this loop starts them
                continue
            message = conn.recv()
        except (EOFError, OSError):
            return
        if isinstance(message, SynthesisRequest | SynthesisBatch):
            runner.submit(message.requests if isinstance(message, SynthesisBatch) else (message,))
        elif isinstance(message, ControlRequest):
            runner.drain()
            try:
                sender.send(ControlReply(message.request_id, core.control(message)))
            except BaseException as exc:
                sender.send(_reply_error(message.request_id, exc))
            if message.kind is ControlKind.SHUTDOWN:
                return


def _run_jobs(core: EngineCore, sender: _Sender, requests: tuple[SynthesisRequest, ...]) -> None:
    """Acknowledge every job, stream each one's chunks as they are ready, then each one's result or error."""
    for request in requests:
        sender.send(JobAccepted(request.job_id))
    sent = [0] * len(requests)

    def emit(i: int, chunk: AudioChunk, elapsed_s: float) -> None:
        sender.send(ChunkReady(requests[i].job_id, sent[i], chunk, elapsed_s))
        sent[i] += 1

    def done(i: int, outcome: SynthesisResult | BaseException) -> None:
        if isinstance(outcome, SynthesisResult):
            sender.send(outcome)
        else:
            sender.send(_reply_error(requests[i].job_id, outcome))

    finished: set[int] = set()

    def done_once(i: int, outcome: SynthesisResult | BaseException) -> None:
        if i not in finished:
            finished.add(i)
            done(i, outcome)

    try:
        core.run_batch(requests, emit, done_once)
    except BaseException as exc:  # the caller of every unfinished job must still hear why
        for i in range(len(requests)):
            done_once(i, exc)


@dataclass
class WorkerHandle:
    """The UI side's view of one worker process."""

    process: BaseProcess
    conn: Connection
    started_at: float

    @property
    def pid(self) -> int:
        return self.process.pid or 0

    def alive(self) -> bool:
        return self.process.is_alive()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=10)
        self.conn.close()


def spawn_worker(settings: Settings) -> WorkerHandle:
    context = mp.get_context("spawn")
    parent_conn, child_conn = context.Pipe(duplex=True)
    process = context.Process(target=worker_main, args=(child_conn, settings), name="voicelab-worker", daemon=True)
    process.start()
    child_conn.close()
    return WorkerHandle(process, parent_conn, time.monotonic())
