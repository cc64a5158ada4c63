"""Worker-side voice stage: what the engine adds to a backend that lacks native cloning or instructions.

For a fixed-voice backend it matches the prompt voice (speaker encoder, profile LRU, matcher) and renders the
style with DSP; for a backend that clones or follows instructions natively it passes the prompt and style
through and only scores the output. Owns the speaker encoder (loaded on first use) and the profile LRU, so
profile tensors live on the worker's device and are freed on eviction, "Clean cache" (when asked) and restart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from voicelab.backends.base import Capabilities, SpeechRequest
from voicelab.engine.messages import SynthesisRequest
from voicelab.errors import InvalidPromptError
from voicelab.instruct.render import StyleAdjust, style_adjust
from voicelab.instruct.style import Style
from voicelab.voice.cache import CachedVoice, ProfileCache, ProfileCacheStats
from voicelab.voice.dsp import VoiceTransform, apply_transform
from voicelab.voice.encoder import SpeakerEncoder
from voicelab.voice.matcher import VoiceMatcher
from voicelab.voice.profile import SpeakerProfile, build_profile
from voicelab.voice.prompt import PromptAudio

log = logging.getLogger(__name__)

Calibrate = Callable[[], tuple[np.ndarray, int]]


@dataclass(frozen=True)
class CloneScores:
    similarity: float
    similarity_base: float | None
    f0_prompt_hz: float
    f0_output_hz: float


@dataclass(frozen=True)
class VoicePlan:
    """How one request is voiced: what the backend is asked, and the transform the engine applies after it."""

    speech: SpeechRequest
    transform: VoiceTransform
    profile: SpeakerProfile | None
    matched: bool  # the engine moved a fixed voice toward the prompt (so a base similarity is meaningful)

    def render(self, audio: np.ndarray, sample_rate: int) -> np.ndarray:
        if self.transform == VoiceTransform.identity():
            return audio
        return apply_transform(audio, sample_rate, self.transform)


def style_transform(adjust: StyleAdjust) -> VoiceTransform:
    """The signal-level part of a style (its speed part goes to the backend's speaking rate)."""
    return VoiceTransform(
        pitch_semitones=adjust.pitch_semitones,
        pitch_range=adjust.pitch_range,
        formant_factor=adjust.formant_factor,
        gain_db=adjust.gain_db,
        tilt_db_per_octave=adjust.tilt_db_per_octave,
        whisper=adjust.whisper,
    )


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

    def plan(
        self, request: SynthesisRequest, language: str, seed: int, capabilities: Capabilities, calibrate: Calibrate
    ) -> VoicePlan:
        """The backend's request and the engine's transform, by what the backend can do itself."""
        transform = VoiceTransform.identity()
        speed, prompt, profile = request.speed, None, None
        if capabilities.native_instructions:
            style, instruction = request.style, request.instruction
        else:
            adjust = style_adjust(request.style)
            speed = request.speed / adjust.length_scale_factor
            style, instruction = Style(), ""
            transform = style_transform(adjust)
        matched = request.prompt is not None and not capabilities.native_cloning
        if request.prompt is not None:
            cached = self.voice_for(request.prompt, calibrate if matched else None)
            profile = cached.profile
            if capabilities.native_cloning:
                prompt = request.prompt
            elif cached.match is not None:
                transform = cached.match.transform.composed_with(transform)
        speech = SpeechRequest(
            text=request.text,
            language=language,
            speed=speed,
            seed=seed,
            prompt=prompt,
            style=style,
            instruction=instruction,
            sentence_silence_s=request.sentence_silence_s,
            options=dict(request.options),
        )
        return VoicePlan(speech, transform, profile, matched)

    def voice_for(self, prompt: PromptAudio, calibrate: Calibrate | None) -> CachedVoice:
        """The cached profile for this prompt, built on a miss and matched (once) when ``calibrate`` is given."""
        cached = self.cache.get(prompt.sha256)
        if cached is None:
            try:
                profile = build_profile(prompt, self.matcher.encoder, self.device)
            except (ValueError, RuntimeError) as exc:  # Praat and numpy refuse degenerate audio this way
                log.info("prompt %s could not be analysed: %s", prompt.sha256[:12], exc)
                raise InvalidPromptError(
                    "The voice prompt could not be analysed; please use a clear recording of one person speaking."
                ) from exc
            cached = self.cache.put(profile)
        if calibrate is not None and cached.match is None:
            cached = self.cache.put(cached.profile, self.matcher.match(cached.profile, calibrate))
        return cached

    def scores(self, draft: np.ndarray, output: np.ndarray, sample_rate: int, plan: VoicePlan) -> CloneScores | None:
        """Similarity to the prompt (and of the unmatched draft, where the engine matched) and median pitch."""
        if plan.profile is None:
            return None
        similarity, f0_output = self.matcher.score(output, sample_rate, plan.profile)
        base = self.matcher.similarity(draft, sample_rate, plan.profile) if plan.matched else None
        return CloneScores(similarity, base, plan.profile.f0_median_hz, f0_output)

    def cache_stats(self) -> ProfileCacheStats:
        return self.cache.stats()

    def clear_profiles(self) -> None:
        self.cache.clear()

    def unload(self) -> None:
        self.cache.clear()
        self._matcher = None
