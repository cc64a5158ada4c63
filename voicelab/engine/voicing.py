"""Worker-side voice matching and style rendering on top of the backend's speech.

Owns the speaker encoder (loaded on first use) and the bounded profile LRU, so profile tensors live on the
worker's device and are freed on eviction, "Clean cache" (when asked) and soft restart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from voicelab.engine.messages import PromptAudio
from voicelab.errors import InvalidPromptError
from voicelab.instruct.render import StyleAdjust
from voicelab.voice.cache import ProfileCache, ProfileCacheStats
from voicelab.voice.dsp import VoiceTransform, apply_transform
from voicelab.voice.encoder import SpeakerEncoder
from voicelab.voice.matcher import VoiceMatcher
from voicelab.voice.profile import SpeakerProfile, build_profile

log = logging.getLogger(__name__)

Calibrate = Callable[[], tuple[np.ndarray, int]]


@dataclass(frozen=True)
class CloneScores:
    similarity: float
    similarity_base: float
    f0_prompt_hz: float
    f0_output_hz: float


def style_transform(adjust: StyleAdjust) -> VoiceTransform:
    """The signal-level part of a style (its speed part goes to the backend's length scale)."""
    return VoiceTransform(
        pitch_semitones=adjust.pitch_semitones,
        pitch_range=adjust.pitch_range,
        formant_factor=adjust.formant_factor,
        gain_db=adjust.gain_db,
        tilt_db_per_octave=adjust.tilt_db_per_octave,
        whisper=adjust.whisper,
    )


MIN_PROMPT_S = 1.0


def check_prompt(prompt: PromptAudio) -> None:
    """The engine's own guard for prompts that did not come through intake (API callers)."""
    samples = np.asarray(prompt.samples)
    if samples.ndim != 1 or prompt.sample_rate <= 0 or len(samples) < MIN_PROMPT_S * prompt.sample_rate:
        raise InvalidPromptError("The voice prompt is too short; please use at least 1 s of speech.")
    if not np.isfinite(samples).all() or float(np.max(np.abs(samples))) < 1e-4:
        raise InvalidPromptError("The voice prompt is silent or damaged; please record someone speaking.")


class VoiceStage:
    def __init__(self, device: str, cache_capacity: int) -> None:
        self.device = device
        self.cache = ProfileCache(cache_capacity)
        self._matcher: VoiceMatcher | None = None

    @property
    def matcher(self) -> VoiceMatcher:
        if self._matcher is None:
            self._matcher = VoiceMatcher(SpeakerEncoder(self.device))
        return self._matcher

    def profile_for(self, prompt: PromptAudio, calibrate: Calibrate) -> SpeakerProfile:
        """The cached profile for this prompt, built and matched (once) on a miss."""
        profile = self.cache.get(prompt.sha256)
        if profile is None:
            check_prompt(prompt)
            try:
                profile = build_profile(prompt, self.matcher.encoder, self.device)
            except (ValueError, RuntimeError) as exc:  # Praat and numpy refuse degenerate audio this way
                log.info("prompt %s could not be analysed: %s", prompt.sha256[:12], exc)
                raise InvalidPromptError(
                    "The voice prompt could not be analysed; please use a clear recording of one person speaking."
                ) from exc
        if profile.match is None:
            profile = profile.with_match(self.matcher.match(profile, calibrate))
        self.cache.put(profile)
        return profile

    def render(
        self, audio: np.ndarray, sample_rate: int, profile: SpeakerProfile | None, adjust: StyleAdjust
    ) -> np.ndarray:
        transform = VoiceTransform.identity()
        if profile is not None and profile.match is not None:
            transform = profile.match.transform
        transform = transform.composed_with(style_transform(adjust))
        if transform == VoiceTransform.identity():
            return audio
        return apply_transform(audio, sample_rate, transform)

    def scores(self, draft: np.ndarray, output: np.ndarray, sample_rate: int, profile: SpeakerProfile) -> CloneScores:
        similarity, f0_output = self.matcher.score(output, sample_rate, profile)
        similarity_base = self.matcher.similarity(draft, sample_rate, profile)
        return CloneScores(similarity, similarity_base, profile.f0_median_hz, f0_output)

    def cache_stats(self) -> ProfileCacheStats:
        return self.cache.stats()

    def clear_profiles(self) -> None:
        self.cache.clear()

    def unload(self) -> None:
        self.cache.clear()
        self._matcher = None
