"""The worker's lifecycle: spawn, READY handshake, clean exit or kill, restart, and the per-job timeout.

Used only from one worker slot's thread (one supervisor per device). A soft restart asks the worker to exit
(it finishes its cleanup: model unloaded, device cache emptied) and kills it only if it has not gone within a
bound. A new worker that dies while starting (killed, a native crash) is tried again with a growing pause; one
that reports why it cannot load (a missing file) is not, since the same start would fail the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from voicelab.engine.messages import AllocatorStats, ControlKind, ControlReply, ControlRequest, ErrorReply, WorkerReady
from voicelab.engine.proc import WorkerHandle, spawn_worker
from voicelab.settings import Settings

log = logging.getLogger(__name__)

POLL_S = 0.05
STARTUP_TIMEOUT_S = 300.0
EXIT_GRACE_S = 10.0
CONTROL_TIMEOUT_S = 120.0
BACKOFF_S = 0.5  # the pause before the first retry of a start; doubled each time
BACKOFF_MAX_S = 8.0


def backoff_s(retry: int) -> float:
    """The pause before retry number ``retry`` (1, 2, ...) of a worker that died while starting."""
    return min(BACKOFF_S * 2 ** (retry - 1), BACKOFF_MAX_S)


class WorkerSupervisor:
    """Owns at most one worker process at a time and counts its replacements.

    ``restarts`` counts worker processes replaced by a new one (a crash, a timeout, a soft restart, a retry
    after a death while starting), each once; ``start_deaths`` counts the workers that died while starting.
    """

    def __init__(self, settings: Settings, spawn: Callable[[Settings], WorkerHandle] = spawn_worker) -> None:
        self.settings = settings
        self._spawn = spawn
        self.handle: WorkerHandle | None = None
        self.starting: WorkerHandle | None = None
        self.ready: WorkerReady | None = None
        self.load_error: str | None = None
        self.restarts = 0
        self.start_deaths = 0
        self.kept_dying = False  # the last start gave up because every try died (not a load error)
        self.trying = False  # inside start(), backoff pauses included

    @property
    def pid(self) -> int:
        return self.handle.pid if self.handle else 0

    def alive(self) -> bool:
        return self.handle is not None and self.handle.alive()

    def uptime_s(self) -> float | None:
        return time.monotonic() - self.handle.started_at if self.handle and self.ready else None

    @property
    def starting_pid(self) -> int:
        return self.starting.pid if self.starting else 0

    def start(self, stopping: Callable[[], bool], backend: str | None = None) -> bool:
        """Spawn a worker and wait for READY, trying again with backoff while new workers die while starting.

        ``backend``: from now on, workers load this backend (the voice engine switch). False (with ``load_error``
        set) when it could not load, or when ``start_retries`` more tries died too.
        """
        if backend is not None:
            self.settings = dataclasses.replace(self.settings, backend=backend)
        self.kept_dying, self.trying, self.load_error = False, True, None
        try:
            return self._start_with_retries(stopping)
        finally:
            self.trying = False

    def _start_with_retries(self, stopping: Callable[[], bool]) -> bool:
        for retry in range(self.settings.start_retries + 1):
            if retry:
                log.warning("worker died while starting; retry %d in %.1f s", retry, backoff_s(retry))
                if not _pause(backoff_s(retry), stopping):
                    return False
                self.restarts += 1  # the worker that died while starting is replaced by the next one
            outcome = self._start_once(stopping)
            if outcome != "died":
                return outcome == "ready"
            self.start_deaths += 1
        self.kept_dying = True
        where = "" if self.settings.device == "auto" else f" on {self.settings.device}"
        self.load_error = (
            f"The engine worker{where} stopped while starting "
            f"{self.settings.start_retries + 1} times in a row; see the log for details."
        )
        return False

    def _start_once(self, stopping: Callable[[], bool]) -> str:
        """One spawn: "ready", "load error" (it said why), "died" (no READY: killed, crashed, hung) or "stopped"."""
        started = time.monotonic()
        worker = self.starting = self._spawn(self.settings)
        try:
            while time.monotonic() < started + STARTUP_TIMEOUT_S:
                if stopping():
                    worker.kill()
                    return "stopped"
                if worker.conn.poll(POLL_S):
                    message = worker.conn.recv()
                    if isinstance(message, WorkerReady):
                        self.handle, self.ready, self.load_error = worker, message, None
                        log.info("worker %d ready in %.1fs", message.pid, time.monotonic() - started)
                        return "ready"
                    if isinstance(message, ErrorReply):
                        self._failed(worker, message.message)
                        return "load error"
                elif not worker.alive():
                    break
        except (EOFError, OSError):
            pass
        finally:
            self.starting = None
        worker.kill()
        log.error("worker %d stopped while starting (exit code %s)", worker.pid, worker.process.exitcode)
        self.handle, self.ready = None, None
        return "died"

    def _failed(self, worker: WorkerHandle, message: str) -> None:
        worker.kill()
        log.error("worker failed to start: %s", message)
        self.handle, self.ready, self.load_error = None, None, message

    def stop(self, graceful: bool) -> None:
        """End the worker: ask it to exit cleanly first when ``graceful``, kill it if it does not in time."""
        worker, self.handle, self.ready = self.handle, None, None
        if worker is None:
            return
        if graceful and worker.alive():
            with contextlib.suppress(OSError, EOFError):
                worker.conn.send(ControlRequest(ControlKind.SHUTDOWN))
                worker.process.join(timeout=EXIT_GRACE_S)
            if worker.alive():
                log.warning("worker %d did not exit within %.0f s; killing it", worker.pid, EXIT_GRACE_S)
        worker.kill()

    def replace(self, graceful: bool, stopping: Callable[[], bool], backend: str | None = None) -> bool:
        """Stop the current worker (counted as a restart) and start a new one (loading ``backend`` where given)."""
        if self.handle is not None:
            self.restarts += 1
        self.stop(graceful)
        return self.start(stopping, backend)

    def forget_dead(self) -> bool:
        """Clear a worker that died on its own; True when there was one (counted as a restart)."""
        if self.handle is None:
            return False
        self.restarts += 1
        self.stop(graceful=False)
        return True

    def send(self, message: Any) -> None:
        """Send to the worker; a dead pipe is noticed on the next loop (the job then fails as a crash)."""
        if self.handle is not None:
            with contextlib.suppress(OSError):
                self.handle.conn.send(message)

    def receive(self, wait_s: float) -> list[Any]:
        """Every message waiting (waiting up to ``wait_s`` for the first); [] when the pipe is closed."""
        worker = self.handle
        if worker is None:
            return []
        messages: list[Any] = []
        try:
            timeout = wait_s
            while worker.conn.poll(timeout):
                messages.append(worker.conn.recv())
                timeout = 0
        except (EOFError, OSError):
            worker.process.join(timeout=1.0)
        return messages

    def ask_stats(self, on_other: Callable[[Any], None]) -> AllocatorStats | None:
        """A synchronous stats round-trip right after READY (nothing else is in flight then); other messages
        that arrive meanwhile (heartbeats) go to ``on_other``."""
        request = ControlRequest(ControlKind.STATS)
        self.send(request)
        deadline = time.monotonic() + CONTROL_TIMEOUT_S
        while time.monotonic() < deadline and self.alive():
            for message in self.receive(POLL_S):
                if isinstance(message, ControlReply) and message.request_id == request.request_id:
                    assert isinstance(message.payload, AllocatorStats)
                    return message.payload
                on_other(message)
        return None

    def overdue(self, started_at: float) -> bool:
        """A job running since ``started_at`` (monotonic) has passed the per-job timeout."""
        return time.monotonic() - started_at > self.settings.job_timeout_s


def _pause(seconds: float, stopping: Callable[[], bool]) -> bool:
    """Sleep ``seconds`` unless stopping (then False at once)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if stopping():
            return False
        time.sleep(min(POLL_S, max(deadline - time.monotonic(), 0.0)))
    return not stopping()
