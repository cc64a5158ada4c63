"""Worker-side voice stage: what the engine adds to a backend that lacks native cloning or instructions.

For a fixed-voice backend it matches the prompt voice (speaker encoder, profile LRU, matcher) and renders the
style with DSP; for a backend that clones or follows instructions natively it passes the prompt and style
through and only scores the output. Owns the speaker encoder (loaded on first use) and the profile LRU, so
profile tensors live on the worker's device and are freed on eviction, "Clean cache" (when asked) and restart.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

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

Calibrate = Callable[[str], tuple[np.ndarray, int]]  # the backend voice of one language on a fixed sentence


@dataclass(frozen=True)
class CloneScores:
    similarity: float
    similarity_base: float | None
    f0_prompt_hz: float
    f0_output_hz: float


@dataclass(frozen=True)
class VoicePlan:
    """How one request is voiced: what the backend is asked, and the transform the engine applies per language."""

    speech: SpeechRequest
    transforms: Mapping[str, VoiceTransform]
    profile: SpeakerProfile | None
    matched: bool  # the engine moved a fixed voice toward the prompt (so a base similarity is meaningful)

    def transform_for(self, language: str) -> VoiceTransform:
        if language in self.transforms:
            return self.transforms[language]
        return next(iter(self.transforms.values()), VoiceTransform.identity())

    def render(self, audio: np.ndarray, sample_rate: int, language: str) -> np.ndarray:
        transform = self.transform_for(language)
        if transform == VoiceTransform.identity():
            return audio
        return apply_transform(audio, sample_rate, transform)


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
        self,
        request: SynthesisRequest,
        languages: tuple[str, ...],
        seed: int,
        capabilities: Capabilities,
        calibrate: Calibrate,
    ) -> VoicePlan:
        """The backend's request and, per language of the text, the transform the engine adds after it."""
        matched = request.prompt is not None and not capabilities.native_cloning
        cached = self.voice_for(request.prompt, languages if matched else (), calibrate) if request.prompt else None
        style, instruction, speed = request.style, request.instruction, request.speed
        base = VoiceTransform.identity()
        native_pitch: tuple[str, ...] = ()
        if not capabilities.native_instructions:
            adjust = style_adjust(request.style)
            speed, base, instruction = request.speed / adjust.length_scale_factor, style_transform(adjust), ""
            native_pitch = () if matched else capabilities.native_pitch_languages
            style = Style(pitch_semitones=adjust.pitch_semitones or None) if native_pitch else Style()
        transforms = {}
        for language in languages:
            transform = replace(base, pitch_semitones=0.0) if language in native_pitch else base
            match = cached.match(language) if cached is not None and matched else None
            transforms[language] = match.transform.composed_with(transform) if match else transform
        speech = SpeechRequest(
            text=request.text,
            language=request.language,
            speed=speed,
            seed=seed,
            prompt=request.prompt if capabilities.native_cloning else None,
            style=style,
            instruction=instruction,
            sentence_silence_s=request.sentence_silence_s,
            options=dict(request.options),
        )
        return VoicePlan(speech, transforms, cached.profile if cached else None, matched)

    def voice_for(self, prompt: PromptAudio, languages: tuple[str, ...], calibrate: Calibrate) -> CachedVoice:
        """The cached profile for this prompt, built on a miss and matched (once) to each voice in ``languages``."""
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
        missing = [language for language in languages if cached.match(language) is None]
        if missing:
            matches = dict(cached.matches)
            for language in missing:
                matches[language] = self.matcher.match(cached.profile, functools.partial(calibrate, language))
            cached = self.cache.put(cached.profile, matches)
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
