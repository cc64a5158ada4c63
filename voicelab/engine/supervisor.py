"""The worker's lifecycle: spawn, READY handshake, clean exit or kill, restart, and the per-job timeout.

Used only from the client's supervisor thread. A soft restart asks the worker to exit (it finishes its
cleanup: model unloaded, device cache emptied) and kills it only if it has not gone within a bound.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from voicelab.engine.messages import ControlKind, ControlRequest, ErrorReply, WorkerReady
from voicelab.engine.proc import WorkerHandle, spawn_worker
from voicelab.settings import Settings

log = logging.getLogger(__name__)

POLL_S = 0.05
STARTUP_TIMEOUT_S = 300.0
EXIT_GRACE_S = 10.0


class WorkerSupervisor:
    """Owns at most one worker process at a time and counts its replacements."""

    def __init__(self, settings: Settings, spawn: Callable[[Settings], WorkerHandle] = spawn_worker) -> None:
        self.settings = settings
        self._spawn = spawn
        self.handle: WorkerHandle | None = None
        self.ready: WorkerReady | None = None
        self.load_error: str | None = None
        self.restarts = 0

    @property
    def pid(self) -> int:
        return self.handle.pid if self.handle else 0

    def alive(self) -> bool:
        return self.handle is not None and self.handle.alive()

    def uptime_s(self) -> float | None:
        return time.monotonic() - self.handle.started_at if self.handle and self.ready else None

    def start(self, stopping: Callable[[], bool]) -> bool:
        """Spawn a worker and wait for READY; False (with ``load_error`` set) when it could not load."""
        started = time.monotonic()
        worker = self._spawn(self.settings)
        while time.monotonic() < started + STARTUP_TIMEOUT_S:
            if worker.conn.poll(POLL_S):
                try:
                    message = worker.conn.recv()
                except (EOFError, OSError):
                    break
                if isinstance(message, WorkerReady):
                    self.handle, self.ready, self.load_error = worker, message, None
                    log.info("worker %d ready in %.1fs", message.pid, time.monotonic() - started)
                    return True
                if isinstance(message, ErrorReply):
                    return self._failed(worker, message.message)
            elif not worker.alive():
                break
            if stopping():
                worker.kill()
                return False
        return self._failed(worker, "The engine worker failed to start; see the log for details.")

    def _failed(self, worker: WorkerHandle, message: str) -> bool:
        worker.kill()
        log.error("worker failed to start: %s", message)
        self.handle, self.ready, self.load_error = None, None, message
        return False

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

    def replace(self, graceful: bool, stopping: Callable[[], bool]) -> bool:
        """Stop the current worker (counted as a restart) and start a new one."""
        if self.handle is not None:
            self.restarts += 1
        self.stop(graceful)
        return self.start(stopping)

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

    def overdue(self, started_at: float) -> bool:
        """A job running since ``started_at`` (monotonic) has passed the per-job timeout."""
        return time.monotonic() - started_at > self.settings.job_timeout_s
