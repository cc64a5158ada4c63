"""The speaker profile: everything about a prompt voice that matching and scoring need, computed once."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import torch

from voicelab.engine.messages import PromptAudio
from voicelab.voice.analysis import VoiceStats, analyse_voice
from voicelab.voice.encoder import SpeakerEncoder

if TYPE_CHECKING:
    from voicelab.voice.matcher import MatchResult

# F1 moves most with vowel and pitch, so the vocal-tract scale leans on F2 and F3.
FORMANT_WEIGHTS = (0.2, 0.4, 0.4)


@dataclass(frozen=True)
class SpeakerProfile:
    """A prompt voice, keyed by the sha256 of its processed samples.

    embedding: unit-norm GE2E embedding (256,) on the worker's device.
    f0_median_hz / f0_range_st: median F0 and its 5-95 percentile spread in semitones (Praat).
    formants_hz: median F1-F3 over voiced frames; ``formant_scale`` compares them with another voice.
    ltas_db: long-term average spectrum in the analysis bands, relative to its mean.
    loudness_dbfs: RMS level of the active frames.
    match: the matcher's result for the backend voice, once computed.
    """

    sha256: str
    embedding: torch.Tensor
    f0_median_hz: float
    f0_range_st: float
    voiced_ratio: float
    formants_hz: tuple[float, float, float]
    ltas_db: tuple[float, ...]
    loudness_dbfs: float
    duration_s: float
    match: MatchResult | None = None

    @property
    def stats(self) -> VoiceStats:
        return VoiceStats(
            f0_median_hz=self.f0_median_hz,
            f0_range_st=self.f0_range_st,
            voiced_ratio=self.voiced_ratio,
            formants_hz=self.formants_hz,
            ltas_db=self.ltas_db,
            loudness_dbfs=self.loudness_dbfs,
        )

    @property
    def device_bytes(self) -> int:
        """Bytes this profile holds on its device (for the resource panel)."""
        return self.embedding.element_size() * self.embedding.nelement()

    def formant_scale(self, reference: VoiceStats) -> float:
        """Estimated vocal-tract scale of this voice relative to ``reference`` (>1: shorter tract, higher formants)."""
        return formant_ratio(self.formants_hz, reference.formants_hz)

    def with_match(self, match: MatchResult) -> SpeakerProfile:
        """The same profile carrying the matcher's result."""
        return replace(self, match=match)


def formant_ratio(target: tuple[float, ...], reference: tuple[float, ...]) -> float:
    """Weighted geometric mean of formant ratios; 1.0 where either side has no estimate."""
    pairs = [(w, t, r) for w, t, r in zip(FORMANT_WEIGHTS, target, reference, strict=True) if t > 0 and r > 0]
    if not pairs:
        return 1.0
    total = sum(w for w, _, _ in pairs)
    return float(math.exp(sum(w * math.log(t / r) for w, t, r in pairs) / total))


def build_profile(
    prompt: PromptAudio, encoder: SpeakerEncoder, device: str | torch.device | None = None
) -> SpeakerProfile:
    """Embed and measure a validated prompt (already 16 kHz mono, trimmed and normalised)."""
    samples = np.asarray(prompt.samples, dtype=np.float32)
    embedding = encoder.embed(samples)
    if device is not None:
        embedding = embedding.to(device)
    stats = analyse_voice(samples, prompt.sample_rate)
    return SpeakerProfile(
        sha256=prompt.sha256,
        embedding=embedding,
        f0_median_hz=stats.f0_median_hz,
        f0_range_st=stats.f0_range_st,
        voiced_ratio=stats.voiced_ratio,
        formants_hz=stats.formants_hz,
        ltas_db=stats.ltas_db,
        loudness_dbfs=stats.loudness_dbfs,
        duration_s=prompt.duration_s,
    )
