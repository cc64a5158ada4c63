"""A bounded LRU of speaker profiles keyed by the prompt's content hash.

The cache is the only long-lived owner of profiles in the worker, so evicting a profile drops the last
reference to its device tensors and the allocator gets the memory back. The matcher's result for the
backend voice is stored beside each profile, computed once, and so is a voice a backend fitted to the prompt
(``FittedStyle``): the engine's one record of the voices it holds, counted on the panel.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from voicelab.lru import BoundedLRU
from voicelab.voice.fitted import FittedStyle

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
    judge_bytes: int = 0  # the similarity judge's weights on the device (loaded with the first prompt), not a profile
    fitted_voices: int = 0  # profiles holding a voice a backend fitted to the prompt (Kokoro's style vectors)
    fitted_bytes: int = 0  # what those fitted voices hold (host memory; moved to the device per request)

    @property
    def hit_rate(self) -> float:
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0


@dataclass(frozen=True)
class CachedVoice:
    """A profile, the matcher's result for each backend voice it was matched to (by language), and the voice a
    natively cloning backend fitted to the prompt, if it fits one."""

    profile: SpeakerProfile
    matches: Mapping[str, MatchResult] = field(default_factory=dict)
    fitted: FittedStyle | None = None

    def match(self, language: str) -> MatchResult | None:
        return self.matches.get(language)


class ProfileCache:
    """LRU of ``CachedVoice`` by sha256; thread-safe so the heartbeat can read ``stats()`` during a job."""

    def __init__(self, capacity: int = 8) -> None:
        self._voices: BoundedLRU[CachedVoice] = BoundedLRU(capacity)
        self.capacity = capacity

    def get(self, sha256: str) -> CachedVoice | None:
        """The entry for this prompt hash (now most recently used), or None."""
        return self._voices.get(sha256)

    def put(
        self,
        profile: SpeakerProfile,
        matches: Mapping[str, MatchResult] | None = None,
        fitted: FittedStyle | None = None,
    ) -> CachedVoice:
        """Insert or replace (e.g. with its match results; a fitted voice already held stays unless replaced);
        evicts the least recently used past capacity."""
        held = self._voices.peek(profile.sha256)
        voice = CachedVoice(profile, dict(matches or {}), fitted or (held.fitted if held is not None else None))
        for sha, evicted in self._voices.put(profile.sha256, voice):
            log.debug("evicted speaker profile %s (%d device bytes)", sha[:12], evicted.profile.device_bytes)
        return voice

    def keep_fitted(self, sha256: str, fitted: FittedStyle) -> bool:
        """Hold ``fitted`` with the prompt's profile; False where the profile is no longer cached."""
        held = self._voices.peek(sha256)
        if held is None:
            return False
        self.put(held.profile, held.matches, fitted)
        return True

    def clear(self) -> int:
        """Drop every profile (the "Clean cache" option); returns how many were dropped."""
        return self._voices.clear()

    def __len__(self) -> int:
        return len(self._voices)

    def __contains__(self, sha256: object) -> bool:
        return sha256 in self._voices

    def stats(self) -> ProfileCacheStats:
        voices = self._voices.values()
        return ProfileCacheStats(
            size=len(voices),
            capacity=self.capacity,
            hits=self._voices.hits,
            misses=self._voices.misses,
            evictions=self._voices.evictions,
            device_bytes=sum(v.profile.device_bytes for v in voices),
            fitted_voices=sum(1 for v in voices if v.fitted is not None),
            fitted_bytes=sum(v.fitted.host_bytes for v in voices if v.fitted is not None),
        )
