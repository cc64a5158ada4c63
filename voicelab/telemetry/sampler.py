"""The UI-side sampling thread: NVML + host every second, merged with the worker's latest allocator figures.

It never talks to the worker: the engine client pushes allocator stats as heartbeats arrive
(``push_allocator``), and the queue/in-flight figures come from a callable that must not block.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from voicelab.engine.messages import AllocatorStats
from voicelab.telemetry.host import HostSampler
from voicelab.telemetry.nvml import NvmlSampler
from voicelab.telemetry.ring import RingBuffer
from voicelab.telemetry.samples import EngineState, JobMarker, MemorySample

logger = logging.getLogger(__name__)


def next_tick(next_due: float, now: float, interval: float) -> tuple[float, float]:
    """The next due time on a fixed grid and how long to wait for it.

    A slow sample shortens the following wait instead of pushing every later sample back; a machine that fell
    a whole interval behind (suspended, starved) restarts the grid at ``now`` instead of bursting to catch up.
    """
    due = next_due + interval
    delay = due - now
    if delay < 0:
        return now, 0.0
    return due, delay


class TelemetrySampler:
    """Appends a ``MemorySample`` to ``ring`` every ``interval`` seconds on a daemon thread.

    ``engine_state`` is called from the sampling thread and must return at once (read a few fields under a
    short lock); ``nvml`` and ``host`` default to samplers of GPU 0 and this process.
    """

    def __init__(
        self,
        nvml: NvmlSampler | None = None,
        host: HostSampler | None = None,
        engine_state: Callable[[], EngineState] = EngineState,
        ring: RingBuffer | None = None,
        interval: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self.nvml = NvmlSampler() if nvml is None else nvml
        self.host = HostSampler() if host is None else host
        self.engine_state = engine_state
        self.ring = RingBuffer() if ring is None else ring
        self.interval = interval
        self.clock = clock
        self._lock = threading.Lock()
        self._allocator: AllocatorStats | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def nvml_note(self) -> str | None:
        """Why there are no NVML figures (e.g. "no NVIDIA GPU"), or ``None`` when there are."""
        return None if self.nvml.available else self.nvml.reason

    def push_allocator(self, stats: AllocatorStats) -> None:
        """Called by the engine client with each heartbeat; cheap and non-blocking."""
        with self._lock:
            self._allocator = stats

    def mark_job(self, job_id: str, latency_s: float) -> None:
        """Put a finished job on the timeline."""
        self.ring.add_marker(JobMarker(timestamp=self.clock(), job_id=job_id, latency_s=latency_s))

    def _allocator_for(self, worker_pid: int | None) -> AllocatorStats | None:
        """The latest allocator figures, dropped if they came from a worker that has been replaced."""
        with self._lock:
            stats = self._allocator
        if stats is None or (worker_pid is not None and stats.worker_pid not in (0, worker_pid)):
            return None
        return stats

    def sample_once(self) -> MemorySample:
        """Take one sample and append it to the ring."""
        state = self.engine_state()
        allocator = self._allocator_for(state.worker_pid)
        worker_pid = state.worker_pid
        if worker_pid is None and allocator is not None and allocator.worker_pid:
            worker_pid = allocator.worker_pid
        sample = MemorySample(
            timestamp=self.clock(),
            nvml=self.nvml.sample(pids=() if worker_pid is None else (worker_pid,)),
            allocator=allocator,
            host=self.host.sample(worker_pid),
            queue_length=state.queue_length,
            job_in_flight=state.job_in_flight,
            nvml_note=self.nvml_note,
        )
        self.ring.append(sample)
        return sample

    def _run(self) -> None:
        next_due = time.monotonic()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception:  # the panel must keep running whatever one reading does
                logger.exception("telemetry sample failed")
            next_due, delay = next_tick(next_due, time.monotonic(), self.interval)
            self._stop.wait(delay)

    def start(self) -> None:
        """Start the sampling thread (no-op if it runs)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="voicelab-telemetry", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def close(self) -> None:
        """Stop sampling and release NVML."""
        self.stop()
        self.nvml.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()
