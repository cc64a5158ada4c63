"""Host figures through psutil: RSS of the UI and worker processes, system RAM, CPU load."""

from __future__ import annotations

import logging
import os

import psutil

from voicelab.telemetry.samples import HostFigures

logger = logging.getLogger(__name__)


class HostSampler:
    """Samples host memory and CPU. Keeps one ``psutil.Process`` per pid so RSS reads stay cheap."""

    def __init__(self, ui_pid: int | None = None) -> None:
        self.ui_pid = os.getpid() if ui_pid is None else ui_pid
        self._processes: dict[int, psutil.Process] = {}
        psutil.cpu_percent(interval=None)  # primes the counter: the first real reading covers one interval

    def _rss(self, pid: int) -> int | None:
        process = self._processes.get(pid)
        try:
            if process is None:
                process = psutil.Process(pid)
                self._processes[pid] = process
            return int(process.memory_info().rss)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            self._processes.pop(pid, None)
            return None

    def sample(self, worker_pid: int | None = None) -> HostFigures:
        """Current figures; ``worker_rss`` is ``None`` if the worker pid is unknown or gone."""
        for stale in [pid for pid in self._processes if pid not in (self.ui_pid, worker_pid)]:
            del self._processes[stale]
        ram = psutil.virtual_memory()
        return HostFigures(
            ui_pid=self.ui_pid,
            ui_rss=self._rss(self.ui_pid) or 0,
            worker_pid=worker_pid,
            worker_rss=None if worker_pid is None else self._rss(worker_pid),
            ram_used=int(ram.total - ram.available),
            ram_total=int(ram.total),
            cpu_pct=float(psutil.cpu_percent(interval=None)),
        )
