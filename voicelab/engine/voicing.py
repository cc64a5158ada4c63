"""Worker-side voice stage: what the engine adds to a backend that lacks native cloning or instructions.

For a fixed-voice backend it matches the prompt voice (speaker encoder, profile LRU, matcher) and renders the
style with DSP; for a backend that clones or follows instructions natively it passes the prompt and style
through and only scores the output. Owns the speaker encoder (loaded on first use) and the profile LRU, so
profile tensors live on the worker's device and are freed on eviction, "Clean cache" (when asked) and restart.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np

from voicelab.backends.base import Capabilities, GraphBucket, SpeechRequest
from voicelab.backends.shape_graphs import ShapeGraphs
from voicelab.engine.calibration import (
    HELD_OUT_TEXTS,
    Calibrate,
    NeutralVoices,
    calibration_text,
)
from voicelab.engine.messages import SynthesisRequest
from voicelab.engine.scoring import CloneScorer, CloneScores, Scored
from voicelab.errors import BackendLoadError, InvalidPromptError
from voicelab.instruct.check import StyleCheck
from voicelab.instruct.render import StyleAdjust, style_adjust
from voicelab.instruct.style import Gender, Style
from voicelab.voice import pulse
from voicelab.voice.cache import CachedVoice, ProfileCache, ProfileCacheStats
from voicelab.voice.dsp import RENDERERS, VoiceTransform, apply_transform
from voicelab.voice.encoder import SpeakerEncoder
from voicelab.voice.fitted import FittedStyle
from voicelab.voice.matcher import VoiceMatcher, median_f0
from voicelab.voice.measure import NeutralVoice, Requested, check_style
from voicelab.voice.profile import SpeakerProfile, build_profile, scoring_profile, unscored_profile
from voicelab.voice.prompt import PromptAudio
from voicelab.voice.pulse_graphs import AnalysisGraphs

log = logging.getLogger(__name__)

T = TypeVar("T")


FELL_BACK = (
    "Voice matching did not bring the {language} voice closer to this prompt on a sentence it had not seen, so the "
    "unmatched voice is used."
)
LANGUAGE_NAMES = {"en": "English", "zh": "Chinese"}


@dataclass(frozen=True)
class VoicePlan:
    """How one request is voiced: what the backend is asked, and the transform the engine applies per language."""

    speech: SpeechRequest
    transforms: Mapping[str, VoiceTransform]
    profile: SpeakerProfile | None
    matched: bool  # the engine moved a fixed voice toward the prompt (so a base similarity is meaningful)
    device: str = "cpu"  # where the transform runs (the worker's device)
    renderer: str = "torch"  # dsp.RENDERERS
    requested: Requested | None = None  # what the style asks (None: no style, or a backend that renders it)
    pitch_reference_hz: float | None = None  # the unstyled voice's median F0 where the draft cannot tell it
    model_pitch: bool = False  # the backend itself shifted the pitch (the draft already carries it)
    notices: tuple[str, ...] = ()  # what the result line tells the user about the prompt and its matching
    analyser: pulse.Analyser = pulse.analyse  # how ``pulse`` analyses a batch (the stage's graphs on a GPU)

    def transform_for(self, language: str) -> VoiceTransform:
        if language in self.transforms:
            return self.transforms[language]
        return next(iter(self.transforms.values()), VoiceTransform.identity())

    def render(self, audio: np.ndarray, sample_rate: int, language: str) -> np.ndarray:
        transform = self.transform_for(language)
        if transform == VoiceTransform.identity():
            return audio
        return apply_transform(audio, sample_rate, transform, self.device, self.renderer, self.analyser)


@dataclass(frozen=True)
class Finished:
    """A job's unvoiced draft and voiced output, for scoring."""

    draft: np.ndarray
    output: np.ndarray
    plan: VoicePlan

    @classmethod
    def joined(cls, drafts: list[np.ndarray], outputs: list[np.ndarray], plan: VoicePlan) -> Finished:
        """The job's whole draft and voiced output, joined once for its result and its scores."""
        return cls(join_chunks(drafts), join_chunks(outputs), plan)


def join_chunks(chunks: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(chunks).astype(np.float32, copy=False) if chunks else np.zeros(0, dtype=np.float32)


def style_transform(adjust: StyleAdjust) -> VoiceTransform:
    """The signal-level part of a style (its speed part goes to the backend's speaking rate)."""
    return VoiceTransform(
        f0_target_hz=adjust.f0_target_hz,
        pitch_semitones=adjust.pitch_semitones,
        pitch_range=adjust.pitch_range,
        formant_factor=adjust.formant_factor,
        gain_db=adjust.gain_db,
        tilt_db_per_octave=adjust.tilt_db_per_octave,
        whisper=adjust.whisper,
    )


def resolve_renderer(name: str, device: str) -> str:
    """``auto``: ``pulse`` (WORLD in PyTorch) on a GPU, ``world`` (pyworld) on the CPU. The two are one algorithm
    and score alike (ECAPA gain +0.025 / +0.049 against +0.018 / +0.042 on both prompt sets, docs/benchmarks.md);
    on a CPU a cached clone costs the same with either (2.5-3.0x plain synthesis), and ``pulse`` runs on the GPU
    without a round trip to the host."""
    if name == "auto":
        return "pulse" if device.startswith("cuda") else "world"
    if name not in RENDERERS:
        choices = f"auto, {', '.join(RENDERERS[:-1])} or {RENDERERS[-1]}"
        raise BackendLoadError(f"Unknown voice renderer '{name}'; use {choices}.")
    return name


def _serialised(method: Callable[..., T]) -> Callable[..., T]:
    """One caller at a time in the stage (its profile LRU, matcher and encoder), for jobs running side by side."""

    @functools.wraps(method)
    def locked(self: VoiceStage, *args: object, **kwargs: object) -> T:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


class VoiceStage:
    """Thread-safe: a backend that runs jobs side by side (``Capabilities.concurrent_jobs``) prepares and scores
    them from several threads."""

    def __init__(self, device: str, cache_capacity: int, renderer: str = "auto", cuda_graphs: bool = True) -> None:
        self._lock = threading.RLock()
        self.device = device
        self.renderer = resolve_renderer(renderer, device)
        self.cache = ProfileCache(cache_capacity)
        self._matcher: VoiceMatcher | None = None
        self.cuda_graphs = cuda_graphs  # the scoring's encoders replay their batches too (``shape_graphs``)
        self.scorer = CloneScorer(device, cuda_graphs)
        self._neutral = NeutralVoices(device)
        graphs = cuda_graphs and device.startswith("cuda") and self.renderer == "pulse"
        self.graphs = AnalysisGraphs() if graphs else None  # the pulse renderer's analysis (``pulse_graphs``)
        self.analyser: pulse.Analyser = self.graphs or pulse.analyse

    @property
    def matcher(self) -> VoiceMatcher:
        if self._matcher is None:
            encoder = SpeakerEncoder(self.device, cuda_graphs=self.cuda_graphs)
            self._matcher = VoiceMatcher(encoder, renderer=self.renderer)
        return self._matcher

    @_serialised
    def plan(
        self,
        request: SynthesisRequest,
        languages: tuple[str, ...],
        seed: int,
        capabilities: Capabilities,
        calibrate: Calibrate,
    ) -> VoicePlan:
        """The backend's request and, per language of the text, the transform the engine adds after it."""
        to_match = tuple(lang for lang in languages if not capabilities.clones_natively(lang)) if request.prompt else ()
        matched = bool(to_match)
        cached = self.voice_for(request.prompt, to_match, calibrate) if request.prompt else None
        profile = cached.profile if cached else None
        if profile is not None and profile.scored:
            self.scorer.warm_shapes(self.matcher, capabilities.sample_rate, matched)
        styled = not capabilities.native_instructions and not request.style.is_neutral
        gender = request.style.gender if request.prompt is None else None  # a prompt's voice is the prompt's
        voiced = {lang: gender if capabilities.voices_gender(lang) else None for lang in languages}
        adjusts = {
            language: self._adjust(request, language, profile if language in to_match else None, calibrate, voiced)
            for language in languages
        }
        first = adjusts[languages[0]] if adjusts else StyleAdjust()
        model_pitch = (
            not matched
            and not capabilities.native_instructions
            and first.f0_target_hz is None
            and any(language in capabilities.native_pitch_languages for language in languages)
        )
        transforms = {}
        for language, adjust in adjusts.items():
            transform = style_transform(adjust) if not capabilities.native_instructions else VoiceTransform.identity()
            if model_pitch and language in capabilities.native_pitch_languages:
                transform = replace(transform, pitch_semitones=0.0)
            match = cached.match(language) if cached is not None and language in to_match else None
            transforms[language] = match.transform.composed_with(transform) if match else transform
        speech = self._speech(request, seed, capabilities, first, model_pitch, any(voiced.values()))
        if capabilities.native_cloning:
            speech = replace(speech, fitted=self._fitted(request, cached))
        requested = Requested(first.length_scale_factor, first.requested_pitch_st, first.gain_db) if styled else None
        first_matched = profile if languages and languages[0] in to_match else None
        reference = self._pitch_reference(languages[0], first_matched, model_pitch, calibrate, voiced)
        notices = request.prompt.notices if request.prompt else ()
        if cached is not None and matched:
            fell_back = [lang for lang in to_match if (m := cached.match(lang)) is not None and m.fell_back]
            notices += tuple(FELL_BACK.format(language=LANGUAGE_NAMES.get(lang, lang)) for lang in fell_back)
        plan = VoicePlan(speech, transforms, profile, matched, self.device, self.renderer, requested, reference)
        return replace(plan, model_pitch=model_pitch, notices=notices, analyser=self.analyser)

    def _fitted(self, request: SynthesisRequest, cached: CachedVoice | None) -> FittedStyle | None:
        """The prompt's fitted voice: the one the request carries (a saved voice's, now held here too), else the
        one this worker fitted before; the backend fits where there is none."""
        prompt = request.prompt
        if prompt is None:
            return None
        carried = request.fitted if request.fitted and request.fitted.prompt_sha256 == prompt.sha256 else None
        if carried is not None:
            self.cache.keep_fitted(prompt.sha256, carried)
            return carried
        return cached.fitted if cached is not None else None

    @_serialised
    def keep_fitted(self, fitted: FittedStyle) -> None:
        """A voice the backend just fitted, held with its prompt's profile (counted on the panel)."""
        if not self.cache.keep_fitted(fitted.prompt_sha256, fitted):
            log.info("fitted voice for %s not held: its profile left the cache", fitted.prompt_sha256[:12])

    def _adjust(
        self,
        request: SynthesisRequest,
        language: str,
        profile: SpeakerProfile | None,
        calibrate: Calibrate,
        voiced: Mapping[str, Gender | None],
    ) -> StyleAdjust:
        """The style on this language's voice (an age/gender target needs the voice's own pitch: the one the
        backend speaks in, its voice of the asked gender included)."""
        style = request.style
        if style.age is None and style.gender is None:
            return style_adjust(style)
        if profile is not None:
            return style_adjust(style, profile.f0_median_hz)
        return style_adjust(style, self.neutral(language, calibrate, voiced.get(language)).f0_hz)

    def _speech(
        self,
        request: SynthesisRequest,
        seed: int,
        capabilities: Capabilities,
        adjust: StyleAdjust,
        model_pitch: bool,
        gendered: bool,
    ) -> SpeechRequest:
        """What the backend is asked (``gendered``: it speaks in its voice of the style's gender)."""
        native = capabilities.native_instructions
        pitch = adjust.pitch_semitones or None if model_pitch else None
        return SpeechRequest(
            text=request.text,
            language=request.language,
            speed=request.speed if native else request.speed / adjust.length_scale_factor,
            seed=seed,
            prompt=request.prompt if capabilities.native_cloning else None,
            style=request.style
            if native
            else Style(pitch_semitones=pitch, gender=request.style.gender if gendered else None),
            instruction=request.instruction if native else "",
            sentence_silence_s=request.sentence_silence_s,
            options=dict(request.options),
        )

    def _pitch_reference(
        self,
        language: str,
        profile: SpeakerProfile | None,
        model_pitch: bool,
        calibrate: Calibrate,
        voiced: Mapping[str, Gender | None],
    ) -> float | None:
        if profile is not None:
            return profile.f0_median_hz  # the matched voice sits on the prompt's pitch
        return self.neutral(language, calibrate, voiced.get(language)).f0_hz if model_pitch else None

    def neutral(self, language: str, calibrate: Calibrate, gender: Gender | None = None) -> NeutralVoice:
        return self._neutral.get(language, calibrate, gender)

    def voice_for(self, prompt: PromptAudio, languages: tuple[str, ...], calibrate: Calibrate) -> CachedVoice:
        """The cached profile for this prompt, built on a miss and matched (once) to each voice in ``languages``."""
        cached = self.cache.get(prompt.sha256)
        if cached is None or (languages and not cached.profile.analysed):
            try:
                profile = self._profile(prompt, matching=bool(languages))
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
                text = calibration_text(language, prompt)
                held_out = functools.partial(calibrate, language, HELD_OUT_TEXTS.get(language, HELD_OUT_TEXTS["en"]))
                calibration = functools.partial(calibrate, language, text)
                matches[language] = self.matcher.match(cached.profile, calibration, held_out)
            cached = self.cache.put(cached.profile, matches)
        return cached

    def _profile(self, prompt: PromptAudio, matching: bool) -> SpeakerProfile:
        """The full analysis where the engine matches the voice; embedding and median pitch where it only scores.
        Either way the judge embeds the prompt too, for the similarity users see."""
        if matching:
            return self.scorer.with_judge_embedding(build_profile(prompt, self.matcher.encoder, self.device), prompt)
        f0 = median_f0(np.asarray(prompt.samples, dtype=np.float32), prompt.sample_rate, self.device)
        try:
            profile = scoring_profile(prompt, self.matcher.encoder, f0, self.device)
            return self.scorer.with_judge_embedding(profile, prompt)
        except BackendLoadError as exc:  # the backend clones by itself: the scores are optional, the take is not
            log.warning("a prompted take without similarity scores: %s", exc)
            return unscored_profile(prompt, f0)

    @_serialised
    def scores(self, draft: np.ndarray, output: np.ndarray, sample_rate: int, plan: VoicePlan) -> CloneScores | None:
        """Similarity to the prompt (and of the unmatched draft, where the engine matched) and median pitch."""
        return self.scores_many([Finished(draft, output, plan)], sample_rate)[0]

    @_serialised
    def scores_many(self, finished: Sequence[Finished], sample_rate: int) -> list[CloneScores | None]:
        """``scores`` of several jobs that finished together, each encoder in one batch (``CloneScorer``)."""
        scored, jobs = [], []
        for k, f in enumerate(finished):
            if f.plan.profile is not None and f.plan.profile.scored:
                scored.append(k)
                jobs.append(Scored(f.output, f.draft, f.plan.profile, f.plan.matched))
        out: list[CloneScores | None] = [None] * len(finished)
        if not jobs:  # nothing prompted: the speaker encoder (an optional package) is never loaded for plain speech
            return out
        for k, scores in zip(scored, self.scorer.score(jobs, sample_rate, self.matcher), strict=True):
            out[k] = scores
        return out

    @_serialised
    def style_check(
        self, draft: np.ndarray, output: np.ndarray, sample_rate: int, plan: VoicePlan, calibrate: Calibrate
    ) -> StyleCheck | None:
        """Requested vs measured duration, pitch and loudness (None without a style the engine rendered)."""
        if plan.requested is None or len(output) == 0:
            return None
        gender = plan.speech.style.gender  # set where the backend speaks in its voice of that gender
        known = self._neutral.languages()
        language = plan.speech.language if plan.speech.language in known else next(iter(plan.transforms), "en")
        neutral = self.neutral(language, calibrate, gender)
        reference = plan.pitch_reference_hz
        return check_style(
            draft, output, sample_rate, plan.speech.text, plan.requested, neutral, reference, self.device
        )

    def loaded_parts(self) -> int:
        """What this stage has loaded on first use so far: the matcher (GE2E), the judge (ECAPA), each language's
        neutral voice and each cached profile (bounded by the cache); ``EngineCore.after_job`` counts them."""
        with self._lock:
            matcher, judge = int(self._matcher is not None), int(self.scorer.judge.loaded)
            return matcher + judge + len(self._neutral) + self.cache.stats().size

    def cache_stats(self) -> ProfileCacheStats:
        return replace(self.cache.stats(), judge_bytes=self.scorer.device_bytes())

    @_serialised
    def clear_profiles(self) -> None:
        self.cache.clear()

    def graph_buckets(self) -> tuple[GraphBucket, ...]:
        """The CUDA graph buckets of the renderer's analysis and the scoring's two encoders (the panel lists them
        beside the backend's)."""
        return tuple(bucket for graphs in self._graph_sets() for bucket in graphs.reports())

    def release_graphs(self) -> int:
        """Drop the renderer's and the encoders' CUDA graphs (Clean cache); returns their pools' bytes."""
        return sum(graphs.release() for graphs in self._graph_sets())

    def _graph_sets(self) -> list[AnalysisGraphs | ShapeGraphs]:
        matcher = self._matcher  # read once: ``unload`` may drop it from another thread
        encoder_graphs = matcher.encoder.graphs if matcher is not None else None
        sets = (self.graphs, self.scorer.judge.graphs, encoder_graphs)
        return [graphs for graphs in sets if graphs is not None]

    @_serialised
    def unload(self) -> None:
        self.release_graphs()  # before the models they read go
        self.cache.clear()
        self._neutral.clear()
        self._matcher = None
        self.scorer.unload()
