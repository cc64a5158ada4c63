"""The speaker profile: everything about a prompt voice that matching and scoring need, computed once."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from voicelab.voice.analysis import VoiceStats, analyse_voice
from voicelab.voice.encoder import SpeakerEncoder
from voicelab.voice.prompt import PromptAudio

# F1 moves most with vowel and pitch, so the vocal-tract scale leans on F2 and F3.
FORMANT_WEIGHTS = (0.2, 0.4, 0.4)


@dataclass(frozen=True)
class SpeakerProfile:
    """A prompt voice, keyed by the sha256 of its processed samples.

    embedding: unit-norm GE2E embedding (256,) on the worker's device.
    stats: pitch, formants, long-term spectrum and loudness of the prompt (``voice.analysis.VoiceStats``).
    analysed: False for a scoring-only profile (``scoring_profile``): its stats hold the median pitch alone.
    scored: False for ``unscored_profile`` (a native-cloning backend without the optional speaker encoders): an
        empty embedding, no judge embedding, and no similarity figures for its takes.
    judge_embedding: the similarity judge's embedding of the prompt (ECAPA-TDNN, ``judges.ecapa``), for scoring
        alone: the matcher never reads it, so the figure users see is not the one the search maximised.
    The matcher's result for a backend voice is kept beside the profile (``voice.cache.CachedVoice``).
    """

    sha256: str
    embedding: torch.Tensor
    stats: VoiceStats
    duration_s: float
    analysed: bool = True
    judge_embedding: torch.Tensor | None = None
    scored: bool = True  # False: the speaker encoders are not installed, so this voice's takes carry no scores

    @property
    def f0_median_hz(self) -> float:
        return self.stats.f0_median_hz

    @property
    def device_bytes(self) -> int:
        """Bytes this profile holds on its device (for the resource panel)."""
        tensors = [self.embedding] if self.judge_embedding is None else [self.embedding, self.judge_embedding]
        return sum(t.element_size() * t.nelement() for t in tensors)

    def with_judge_embedding(self, embedding: torch.Tensor) -> SpeakerProfile:
        return replace(self, judge_embedding=embedding)

    def formant_scale(self, reference: VoiceStats) -> float:
        """Estimated vocal-tract scale of this voice relative to ``reference`` (>1: shorter tract, higher formants)."""
        return formant_ratio(self.stats.formants_hz, reference.formants_hz)


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
    return SpeakerProfile(
        sha256=prompt.sha256,
        embedding=embedding,
        stats=analyse_voice(samples, prompt.sample_rate),
        duration_s=prompt.duration_s,
    )


def scoring_profile(
    prompt: PromptAudio, encoder: SpeakerEncoder, f0_median_hz: float, device: str | torch.device | None = None
) -> SpeakerProfile:
    """For a backend that clones natively: only what its score line shows (the embedding and the prompt's median
    pitch, measured by the caller), without the analysis matching needs. Praat pitch, formants and the long-term
    spectrum took 330 of 440 ms for a 10 s prompt on a CPU, on every new prompt (CosyVoice's new-prompt requests
    were 16 % slower than upstream's, all of it there)."""
    embedding = encoder.embed(np.asarray(prompt.samples, dtype=np.float32))
    if device is not None:
        embedding = embedding.to(device)
    stats = VoiceStats(f0_median_hz, 0.0, 0.0, (0.0, 0.0, 0.0), (), float("-inf"))
    return SpeakerProfile(prompt.sha256, embedding, stats, prompt.duration_s, analysed=False)


def unscored_profile(prompt: PromptAudio, f0_median_hz: float) -> SpeakerProfile:
    """For a backend that clones natively where the speaker encoders (Resemblyzer, the ECAPA judge) are not
    installed: the voice is still cached and spoken, its takes just carry no similarity figures."""
    stats = VoiceStats(f0_median_hz, 0.0, 0.0, (0.0, 0.0, 0.0), (), float("-inf"))
    return SpeakerProfile(prompt.sha256, torch.zeros(0), stats, prompt.duration_s, analysed=False, scored=False)
