"""A thread-safe least-recently-used map with a fixed capacity (torch-free).

The worker's speaker profiles (``voice.cache.ProfileCache``) and CosyVoice's prompt features (in place of
upstream's unbounded ``spk2info``) each live in one: evicting an entry drops the last reference to its tensors.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")


class BoundedLRU(Generic[V]):
    """Keyed by string; ``get`` makes an entry the most recently used, ``put`` evicts the least recently used
    past ``capacity``. Counts hits, misses and evictions for the panel."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._items: OrderedDict[str, V] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def get(self, key: str) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is None:
                self.misses += 1
                return None
            self.hits += 1
            self._items.move_to_end(key)
            return value

    def peek(self, key: str) -> V | None:
        """The entry without counting a lookup or changing its place (for updating an entry in place)."""
        with self._lock:
            return self._items.get(key)

    def put(self, key: str, value: V) -> list[tuple[str, V]]:
        """Insert or replace; the entries evicted to stay within capacity, oldest first."""
        evicted: list[tuple[str, V]] = []
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                evicted.append(self._items.popitem(last=False))
            self.evictions += len(evicted)
        return evicted

    def clear(self) -> int:
        """Drop every entry; how many there were."""
        with self._lock:
            count = len(self._items)
            self._items.clear()
            return count

    def values(self) -> list[V]:
        """A snapshot, least recently used first."""
        with self._lock:
            return list(self._items.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items
