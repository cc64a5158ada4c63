"""Voice matching: choose the ``VoiceTransform`` that moves the backend voice toward a prompt voice.

Start from an analytic estimate (pitch level and range, formant scale, long-term spectrum, loudness), then
refine a few of its parameters by coordinate search on a calibration utterance, maximising the speaker
embedding's cosine similarity to the prompt. The identity transform is always a candidate, so matching
never scores below the unmatched voice on the calibration utterance.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch

from voicelab.voice import pulse, spectral, world_render
from voicelab.voice.analysis import VoiceStats, analyse_voice, ltas_db, resample
from voicelab.voice.dsp import EQ_LIMIT_DB, VoiceTransform, apply_transform, padded_rows, transform_batch
from voicelab.voice.encoder import SAMPLE_RATE as ENCODER_RATE
from voicelab.voice.encoder import SpeakerEncoder
from voicelab.voice.pitch import voiced_median, yin_f0
from voicelab.voice.profile import SpeakerProfile, formant_ratio
from voicelab.voice.shapes import ladder, on_ladder

log = logging.getLogger(__name__)

RANGE_LIMITS = (0.5, 2.0)
# Above ~1.15 the recogniser's word error rate climbs fast (8 Harvard texts at 200 Hz: formant 1.1 -> 38 %,
# 1.2 -> 48 %, 1.3 -> 60 %, unshifted voice 41 %), so the search stays at or below 1.15.
FORMANT_LIMITS = (0.85, 1.15)
PITCH_OFFSET_ST = 0.5  # the search tries this far off the prompt's median (10 % would be 1.65 st)
FORMANT_STEP = 1.06
EQ_STRENGTHS = (1.5, 0.5)
RANGE_STEPS = (1.4, 1 / 1.4)
MIN_IMPROVEMENT = 0.002  # a move must beat the current best by this much (the score is noisy)
MAX_EVALUATIONS = 20
# The renderer the search renders its candidates with, where it is not the requests' own: the mel renderer moves
# the same envelope and pitch parameters as the STFT renderer (the same cepstral split), at a fraction of its cost
# on a CPU (HiFi-GAN renders about 0.5 x real time on one core), so its search runs on the STFT renderer; the
# held-out check, which decides whether the match is kept, renders with the mel renderer itself.
SEARCH_RENDERER = {"mel": "torch"}


@dataclass(frozen=True)
class MatchResult:
    """The chosen transform and the embedding similarity to the prompt before and after it (calibration).

    held_out: (unmatched, matched) similarity on a sentence the search never saw, where one was given.
    fell_back: the search's transform scored below the unmatched voice there, so the identity is kept instead.
    """

    transform: VoiceTransform
    similarity_base: float
    similarity_matched: float
    evaluations: int = 0
    seconds: float = 0.0
    held_out: tuple[float, float] | None = None
    fell_back: bool = False

    @property
    def gain(self) -> float:
        return self.similarity_matched - self.similarity_base


@dataclass(frozen=True)
class _Candidate:
    """Search coordinates around the analytic estimate."""

    pitch_offset_st: float = 0.0
    range_factor: float = 1.0
    formant_factor: float = 1.0
    eq_strength: float = 1.0


def _clamp(value: float, limits: tuple[float, float]) -> float:
    return min(limits[1], max(limits[0], value))


def smooth_eq(target_ltas: tuple[float, ...], current_ltas: np.ndarray) -> tuple[float, ...]:
    """Per-band gains that move ``current`` toward ``target``: 3-band smoothing, mean removed, +-12 dB."""
    diff = np.asarray(target_ltas, dtype=np.float64) - np.asarray(current_ltas, dtype=np.float64)
    padded = np.pad(diff, 1, mode="edge")
    smooth = (padded[:-2] + 2.0 * padded[1:-1] + padded[2:]) / 4.0
    smooth -= smooth.mean()
    return tuple(float(v) for v in np.clip(smooth, -EQ_LIMIT_DB, EQ_LIMIT_DB))


def median_f0(audio: np.ndarray, sr: int, device: torch.device | str = "cpu") -> float:
    """Median F0 of the voiced frames (the torch tracker the transform uses); 0.0 when nothing is voiced."""
    return median_f0_many([audio], sr, device)[0]


def median_f0_many(audios: list[np.ndarray], sr: int, device: torch.device | str = "cpu") -> list[float]:
    """``median_f0`` of each, tracked as one zero-padded batch (padding is silence: unvoiced frames), its width
    rounded up onto a ladder of quarter seconds so the tracker's FFT shapes recur (``voice.shapes``)."""
    if not audios:
        return []
    with torch.inference_mode():
        batch = padded_rows(audios, functools.partial(on_ladder, step=sr // 4)).to(device)
        medians = voiced_median(yin_f0(batch, sr, spectral.Grid.for_rate(sr).hop))
    return [float(m) for m in medians.cpu()]


def warm_f0_shapes(sr: int, limit_samples: int, device: torch.device | str) -> list[int]:
    """``median_f0_many`` of one row at every width up to ``limit_samples`` once, on silence, so the tracker's cuFFT
    plans exist before a request's scoring needs them; returns the widths."""
    widths = ladder(sr // 4, limit_samples)
    for width in widths:
        median_f0_many([np.zeros(width, dtype=np.float32)], sr, device)
    return list(widths)


class VoiceMatcher:
    """Finds and scores voice-matching transforms with one speaker encoder."""

    def __init__(
        self, encoder: SpeakerEncoder, max_evaluations: int = MAX_EVALUATIONS, renderer: str = "torch"
    ) -> None:
        self.encoder = encoder
        self.max_evaluations = max_evaluations
        self.renderer = renderer  # the requests' renderer: the held-out check renders with it
        self.search_renderer = SEARCH_RENDERER.get(renderer, renderer)  # the search's candidates

    def similarity(self, audio: np.ndarray, sr: int, profile: SpeakerProfile) -> float:
        return self.similarities([audio], sr, profile)[0]

    def similarities(self, pieces: list[np.ndarray], sr: int, profile: SpeakerProfile) -> list[float]:
        """Similarity of each piece to the prompt, all embedded in one batch."""
        return self.similarities_to(pieces, sr, [profile] * len(pieces))

    def similarities_to(self, pieces: list[np.ndarray], sr: int, profiles: list[SpeakerProfile]) -> list[float]:
        """Similarity of each piece to its own prompt (pieces of several jobs), all embedded in one batch."""
        embeddings = self.encoder.embed_batch([resample(p, sr, ENCODER_RATE) for p in pieces])
        return [self.encoder.similarity(e, p.embedding) for e, p in zip(embeddings, profiles, strict=True)]

    def score(self, output: np.ndarray, sr: int, profile: SpeakerProfile) -> tuple[float, float]:
        """Similarity of a finished output to the prompt, and the output's median F0 in Hz."""
        return self.similarity(output, sr, profile), median_f0(output, sr, self.encoder.device)

    def analytic(self, profile: SpeakerProfile, base: VoiceStats) -> VoiceTransform:
        """The transform from statistics alone (flat EQ; the EQ depends on the rendered audio).

        The pitch level is an F0 target (the prompt's median) rather than a fixed shift of
        ``12 * log2(f0_prompt / f0_base)`` semitones: the backend's median moves by several percent from
        sentence to sentence, so a fixed shift measured on the calibration sentence misses the target.
        """
        own = profile.stats
        spread = own.f0_range_st / base.f0_range_st if base.f0_range_st > 0 and own.f0_range_st > 0 else 1.0
        return VoiceTransform(
            f0_target_hz=profile.stats.f0_median_hz if profile.stats.f0_median_hz > 0 else None,
            pitch_range=_clamp(spread, RANGE_LIMITS),
            formant_factor=_clamp(formant_ratio(profile.stats.formants_hz, base.formants_hz), FORMANT_LIMITS),
            gain_db=profile.stats.loudness_dbfs - base.loudness_dbfs if math.isfinite(base.loudness_dbfs) else 0.0,
        )

    def match(
        self,
        profile: SpeakerProfile,
        synthesize_calibration: Callable[[], tuple[np.ndarray, int]],
        synthesize_held_out: Callable[[], tuple[np.ndarray, int]] | None = None,
    ) -> MatchResult:
        """Search the transform for ``profile`` on a calibration utterance of the backend voice; with a held-out
        utterance, keep it only where it also beats the unmatched voice there (a gain on the calibration sentence
        alone can be the search fitting that sentence: one real speaker scored 0.011 below the unmatched voice)."""
        result = self._search(profile, synthesize_calibration)
        if synthesize_held_out is None or result.transform == VoiceTransform.identity():
            return result
        audio, sr = synthesize_held_out()
        held_base, held_matched = self.held_out_scores(
            profile, np.asarray(audio, dtype=np.float32), sr, result.transform
        )
        fell_back = held_matched < held_base
        if fell_back:
            log.info("matched %s: held-out %.3f < unmatched %.3f, keeping the unmatched voice", profile.sha256[:12],
                     held_matched, held_base)  # fmt: skip
        return replace(
            result,
            transform=VoiceTransform.identity() if fell_back else result.transform,
            held_out=(held_base, held_matched),
            fell_back=fell_back,
        )

    def held_out_scores(
        self, profile: SpeakerProfile, audio: np.ndarray, sr: int, transform: VoiceTransform
    ) -> tuple[float, float]:
        """(unmatched, matched) similarity on the held-out utterance, the match rendered as requests will be."""
        matched = apply_transform(audio, sr, transform, self.encoder.device, self.renderer)
        held_matched, held_base = self.similarities([matched, audio], sr, profile)
        return held_base, held_matched

    def _search(
        self, profile: SpeakerProfile, synthesize_calibration: Callable[[], tuple[np.ndarray, int]]
    ) -> MatchResult:
        started = time.perf_counter()
        audio, sr = synthesize_calibration()
        # The search runs at the encoder's 16 kHz: every rendering is only ever embedded, and the transform's
        # parameters (F0, formant scale, EQ bands in Hz, gain) do not depend on the sample rate.
        audio16 = resample(np.asarray(audio, dtype=np.float32), sr, ENCODER_RATE)
        search = _Search(self, profile, audio16, ENCODER_RATE)
        best = search.run()
        result = MatchResult(
            transform=search.transform(best),
            similarity_base=search.base_similarity,
            similarity_matched=search.scores[best],
            evaluations=len(search.scores),
            seconds=time.perf_counter() - started,
        )
        log.info(
            "matched %s: similarity %.3f -> %.3f in %d evaluations, %.1f s",
            profile.sha256[:12],
            result.similarity_base,
            result.similarity_matched,
            result.evaluations,
            result.seconds,
        )
        return result


class _Search:
    """One coordinate search; the spectral analysis and renders are shared between candidates."""

    def __init__(self, matcher: VoiceMatcher, profile: SpeakerProfile, audio: np.ndarray, sr: int) -> None:
        self.matcher, self.profile, self.sr = matcher, profile, sr
        self.start = matcher.analytic(profile, analyse_voice(audio, sr))
        self.audio = torch.from_numpy(np.asarray(audio, dtype=np.float32)).to(matcher.encoder.device).unsqueeze(0)
        self.lengths = torch.tensor([len(audio)], device=self.audio.device)
        self.analysis: spectral.Analysis | pulse.PulseFeatures | world_render.WorldFeatures | None = None
        with torch.inference_mode():
            if matcher.search_renderer == "torch":
                self.analysis = spectral.analyse(self.audio, self.lengths, sr)
            elif matcher.search_renderer == "pulse":
                self.analysis = pulse.analyse(self.audio, self.lengths, sr)
            elif matcher.search_renderer == "world":  # the same values transform_batch hands each rendering
                self.analysis = world_render.analyse_world(np.nan_to_num(np.asarray(audio, dtype=np.float32)), sr)
        self.renders: dict[tuple[float, float, float], tuple[np.ndarray, tuple[float, ...]]] = {}
        self.base_similarity = matcher.similarity(audio, sr, profile)
        self.scores: dict[_Candidate | None, float] = {None: self.base_similarity}

    def transform(self, c: _Candidate | None) -> VoiceTransform:
        """The full transform of a candidate (None: loudness only, i.e. the unmatched voice)."""
        if c is None:
            return VoiceTransform(gain_db=self.start.gain_db)
        _, eq = self._render(c)
        gains = np.clip(c.eq_strength * np.asarray(eq), -EQ_LIMIT_DB, EQ_LIMIT_DB)
        return replace(self._voice(c), eq_gains_db=tuple(float(g) for g in gains))

    def _voice(self, c: _Candidate) -> VoiceTransform:
        return replace(
            self.start,
            pitch_semitones=c.pitch_offset_st,
            pitch_range=_clamp(self.start.pitch_range * c.range_factor, RANGE_LIMITS),
            formant_factor=c.formant_factor,
        )

    def _run(self, transform: VoiceTransform) -> np.ndarray:
        renderer = self.matcher.search_renderer
        out = transform_batch(self.audio, self.lengths, self.sr, [transform], analysis=self.analysis, renderer=renderer)
        return np.asarray(out[0].cpu().numpy(), dtype=np.float32)

    def _render(self, c: _Candidate) -> tuple[np.ndarray, tuple[float, ...]]:
        """The candidate's pitch and formants rendered, and the full-strength EQ toward the prompt."""
        key = (c.pitch_offset_st, c.range_factor, c.formant_factor)
        if key not in self.renders:
            audio = self._run(replace(self._voice(c), gain_db=0.0))
            eq = smooth_eq(self.profile.stats.ltas_db, ltas_db(resample(audio, self.sr, ENCODER_RATE), ENCODER_RATE))
            self.renders[key] = (audio, eq)
        return self.renders[key]

    def evaluate(self, c: _Candidate) -> float:
        if c not in self.scores:
            out = self._run(replace(self.transform(c), gain_db=0.0))
            self.scores[c] = self.matcher.similarity(out, self.sr, self.profile)
        return self.scores[c]

    def _try(self, best: _Candidate, **changes: float) -> _Candidate:
        """``best`` with ``changes`` if that scores clearly higher (and the budget allows evaluating it)."""
        candidate = replace(best, **changes)
        if candidate not in self.scores and len(self.scores) >= self.matcher.max_evaluations:
            return best
        return candidate if self.evaluate(candidate) > self.scores[best] + MIN_IMPROVEMENT else best

    def _line(self, best: _Candidate, step: float) -> _Candidate:
        """Walk the formant factor up, or else down, by ``step`` while the similarity improves."""
        for direction in (1, -1):
            moved = False
            while True:
                value = best.formant_factor
                new = round(_clamp(value * step**direction, FORMANT_LIMITS), 4)
                nxt = best if new == value else self._try(best, formant_factor=new)
                if nxt is best:
                    break
                best, moved = nxt, True
            if moved:
                break
        return best

    def run(self) -> _Candidate | None:
        """Formant line search, then EQ strength, pitch range and level offsets, then a finer formant step."""
        best = _Candidate(formant_factor=self.start.formant_factor)
        self.evaluate(best)
        best = self._line(best, FORMANT_STEP)
        for name, values in (
            ("eq_strength", EQ_STRENGTHS),
            ("range_factor", RANGE_STEPS),
            ("pitch_offset_st", (PITCH_OFFSET_ST, -PITCH_OFFSET_ST)),
        ):
            for value in values:
                best = self._try(best, **{name: value})
        best = self._line(best, FORMANT_STEP**0.5)
        return max(self.scores, key=lambda k: self.scores[k])
