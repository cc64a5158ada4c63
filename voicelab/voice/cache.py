"""A bounded LRU of speaker profiles keyed by the prompt's content hash.

The cache is the only long-lived owner of profiles in the worker, so evicting a profile drops the last
reference to its device tensors and the allocator gets the memory back. The matcher's result for the
backend voice is stored beside each profile, computed once.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for annotations: this module stays torch-free, so the server can read the stats type
    from voicelab.voice.matcher import MatchResult
    from voicelab.voice.profile import SpeakerProfile

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProfileCacheStats:
    """Figures for the resource panel."""

    size: int
    capacity: int
    hits: int
    misses: int
    evictions: int = 0
    device_bytes: int = 0

    @property
    def hit_rate(self) -> float:
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0


@dataclass(frozen=True)
class CachedVoice:
    """A profile and the matcher's result for each backend voice it was matched to, by language."""

    profile: SpeakerProfile
    matches: Mapping[str, MatchResult] = field(default_factory=dict)

    def match(self, language: str) -> MatchResult | None:
        return self.matches.get(language)


class ProfileCache:
    """LRU of ``CachedVoice`` by sha256; thread-safe so the heartbeat can read ``stats()`` during a job."""

    def __init__(self, capacity: int = 8) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._voices: OrderedDict[str, CachedVoice] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0
        self._evictions = 0

    def get(self, sha256: str) -> CachedVoice | None:
        """The entry for this prompt hash (now most recently used), or None."""
        with self._lock:
            voice = self._voices.get(sha256)
            if voice is None:
                self._misses += 1
                return None
            self._hits += 1
            self._voices.move_to_end(sha256)
            return voice

    def put(self, profile: SpeakerProfile, matches: Mapping[str, MatchResult] | None = None) -> CachedVoice:
        """Insert or replace (e.g. with its match results); evicts the least recently used past capacity."""
        voice = CachedVoice(profile, dict(matches or {}))
        with self._lock:
            self._voices[profile.sha256] = voice
            self._voices.move_to_end(profile.sha256)
            while len(self._voices) > self.capacity:
                sha, evicted = self._voices.popitem(last=False)
                self._evictions += 1
                log.debug("evicted speaker profile %s (%d device bytes)", sha[:12], evicted.profile.device_bytes)
                del evicted
        return voice

    def clear(self) -> int:
        """Drop every profile (the "Clean cache" option); returns how many were dropped."""
        with self._lock:
            count = len(self._voices)
            self._voices.clear()
            return count

    def __len__(self) -> int:
        with self._lock:
            return len(self._voices)

    def __contains__(self, sha256: object) -> bool:
        with self._lock:
            return sha256 in self._voices

    def stats(self) -> ProfileCacheStats:
        with self._lock:
            return ProfileCacheStats(
                size=len(self._voices),
                capacity=self.capacity,
                hits=self._hits,
                misses=self._misses,
                evictions=self._evictions,
                device_bytes=sum(v.profile.device_bytes for v in self._voices.values()),
            )
