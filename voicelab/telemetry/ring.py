"""A bounded, thread-safe history of samples and job markers; the panel reads it, the sampler writes it."""

from __future__ import annotations

import threading
import time
from collections import deque

from voicelab.telemetry.samples import JobMarker, MemorySample


class RingBuffer:
    """The last ``capacity`` samples (1800 = 30 minutes at one per second) and as many job markers."""

    def __init__(self, capacity: int = 1800) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._lock = threading.Lock()
        self._samples: deque[MemorySample] = deque(maxlen=capacity)
        self._markers: deque[JobMarker] = deque(maxlen=capacity)

    def append(self, sample: MemorySample) -> None:
        with self._lock:
            self._samples.append(sample)

    def add_marker(self, marker: JobMarker) -> None:
        with self._lock:
            self._markers.append(marker)

    def latest(self) -> MemorySample | None:
        with self._lock:
            return self._samples[-1] if self._samples else None

    def since(self, seconds: float, now: float | None = None) -> list[MemorySample]:
        """Samples taken in the last ``seconds`` (oldest first)."""
        cutoff = (time.time() if now is None else now) - seconds
        with self._lock:
            return [s for s in self._samples if s.timestamp >= cutoff]

    def markers_since(self, seconds: float, now: float | None = None) -> list[JobMarker]:
        cutoff = (time.time() if now is None else now) - seconds
        with self._lock:
            return [m for m in self._markers if m.timestamp >= cutoff]

    def samples(self) -> list[MemorySample]:
        with self._lock:
            return list(self._samples)

    def __len__(self) -> int:
        with self._lock:
            return len(self._samples)

    def clear(self) -> None:
        with self._lock:
            self._samples.clear()
            self._markers.clear()
