"""A bounded LRU of speaker profiles keyed by the prompt's content hash.

The cache is the only long-lived owner of profiles in the worker, so evicting a profile drops the last
reference to its device tensors and the allocator gets the memory back.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

from voicelab.engine.messages import ProfileCacheStats
from voicelab.voice.profile import SpeakerProfile

log = logging.getLogger(__name__)


class ProfileCache:
    """LRU of ``SpeakerProfile`` by sha256; thread-safe so the heartbeat can read ``stats()`` during a job."""

    def __init__(self, capacity: int = 8) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._profiles: OrderedDict[str, SpeakerProfile] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0
        self._evictions = 0

    def get(self, sha256: str) -> SpeakerProfile | None:
        """The profile for this prompt hash (now most recently used), or None."""
        with self._lock:
            profile = self._profiles.get(sha256)
            if profile is None:
                self._misses += 1
                return None
            self._hits += 1
            self._profiles.move_to_end(sha256)
            return profile

    def put(self, profile: SpeakerProfile) -> None:
        """Insert or replace (e.g. with its match result); evicts the least recently used past capacity."""
        with self._lock:
            self._profiles[profile.sha256] = profile
            self._profiles.move_to_end(profile.sha256)
            while len(self._profiles) > self.capacity:
                sha, evicted = self._profiles.popitem(last=False)
                self._evictions += 1
                log.debug("evicted speaker profile %s (%d device bytes)", sha[:12], evicted.device_bytes)
                del evicted

    def clear(self) -> int:
        """Drop every profile (the "Clean cache" option); returns how many were dropped."""
        with self._lock:
            count = len(self._profiles)
            self._profiles.clear()
            return count

    def __len__(self) -> int:
        with self._lock:
            return len(self._profiles)

    def __contains__(self, sha256: object) -> bool:
        with self._lock:
            return sha256 in self._profiles

    def stats(self) -> ProfileCacheStats:
        with self._lock:
            return ProfileCacheStats(
                size=len(self._profiles),
                capacity=self.capacity,
                hits=self._hits,
                misses=self._misses,
                evictions=self._evictions,
                device_bytes=sum(p.device_bytes for p in self._profiles.values()),
            )
