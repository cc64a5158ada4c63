"""How close a finished job sounds to its prompt, by a judge the voice matching never sees.

Two encoders score every cloned job. ECAPA-TDNN (``judges.ecapa``) gives the similarity a user reads: it is
independent of the match search, which maximises GE2E (``voice.encoder``), so a GE2E gain is partly the
optimiser scoring itself. GE2E's figures stay beside it (``similarity_ge2e``) because they say what the search
achieved. The judge's prompt embedding lives in the profile (``SpeakerProfile.judge_embedding``), computed once
per prompt; the matcher reads only ``SpeakerProfile.embedding``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from voicelab.judges.ecapa import JUDGE_RATE, EcapaJudge
from voicelab.voice.analysis import resample
from voicelab.voice.dsp import padded_rows
from voicelab.voice.encoder import SAMPLE_RATE as ENCODER_RATE
from voicelab.voice.matcher import VoiceMatcher, median_f0, median_f0_many, warm_f0_shapes
from voicelab.voice.profile import SpeakerProfile
from voicelab.voice.prompt import PromptAudio
from voicelab.voice.resampling import resample_rows, resampled_length

log = logging.getLogger(__name__)

# The replies whose scoring shapes are made ahead on a GPU (``CloneScorer.warm_shapes``): 40 s is about 600
# characters of English; a longer reply's scoring still builds its plans the first time its shapes come.
WARM_SECONDS = 40.0


@dataclass(frozen=True)
class CloneScores:
    """One job's figures against its prompt; the ``*_base`` ones are the unmatched draft (``None`` where the
    backend cloned natively, so there is no draft to compare)."""

    similarity: float  # ECAPA cosine: what the user sees
    similarity_base: float | None
    similarity_ge2e: float  # GE2E cosine: the match search's own objective
    similarity_ge2e_base: float | None
    f0_prompt_hz: float
    f0_output_hz: float


@dataclass(frozen=True)
class Scored:
    """A finished job to score: the voiced output, the draft before the engine's transform, and its profile."""

    output: np.ndarray
    draft: np.ndarray
    profile: SpeakerProfile
    matched: bool  # the engine moved a fixed voice toward the prompt (so the draft is a meaningful base)


class CloneScorer:
    """Scores jobs with both encoders; not thread-safe by itself (``VoiceStage`` serialises its callers)."""

    def __init__(self, device: str, cuda_graphs: bool = True) -> None:
        self.device = device
        self.judge = EcapaJudge(device, cuda_graphs=cuda_graphs)
        self._warmed: set[tuple[int, int]] = set()  # (sample rate, pieces a job scores) already warmed

    def with_judge_embedding(self, profile: SpeakerProfile, prompt: PromptAudio) -> SpeakerProfile:
        """The profile carrying the judge's embedding of the prompt (already 16 kHz mono, trimmed)."""
        embedding = self.judge.embed(np.asarray(prompt.samples, dtype=np.float32), prompt.sample_rate)
        return profile.with_judge_embedding(embedding)

    def warm_shapes(self, matcher: VoiceMatcher, sample_rate: int, matched: bool) -> None:
        """On a GPU, once per rate and kind of job: every shape the scoring of one job up to ``WARM_SECONDS`` can
        take (both encoders' and the pitch tracker's, on their ladders: ``voice.shapes``) run on silence, so no
        request pays for building a plan. On an H100 a scored request that met a new shape took 10-50 ms longer
        (docs/benchmarks.md); the first prompted request pays for it instead, once (its time is logged, not yet measured
        on a GPU)."""
        pieces = 2 if matched else 1  # output and unmatched draft, or the output alone
        if not self.device.startswith("cuda") or (sample_rate, pieces) in self._warmed:
            return
        self._warmed.add((sample_rate, pieces))
        started = time.perf_counter()
        shapes = len(self.judge.warm_shapes(int(WARM_SECONDS * JUDGE_RATE), pieces))
        shapes += len(matcher.encoder.warm_shapes(int(WARM_SECONDS * ENCODER_RATE), pieces))
        shapes += len(warm_f0_shapes(sample_rate, int(WARM_SECONDS * sample_rate), self.device))
        log.info("scoring shapes warmed: %d in %.2f s", shapes, time.perf_counter() - started)

    def score(self, jobs: Sequence[Scored], sample_rate: int, matcher: VoiceMatcher) -> list[CloneScores]:
        """Every job's scores, each encoder in one batch over all outputs and drafts (one speaker-encoder batch
        was 1.7x faster for eight jobs than eight alone, even on a CPU)."""
        pieces: list[np.ndarray] = []
        profiles: list[SpeakerProfile] = []
        for job in jobs:
            for piece in [job.output, job.draft] if job.matched else [job.output]:
                pieces.append(piece)
                profiles.append(job.profile)
        if not pieces:
            return []
        pieces = self._at_encoder_rate(pieces, sample_rate)
        ge2e = iter(matcher.similarities_to(pieces, ENCODER_RATE, profiles))
        ecapa = iter(self.judge.similarities(pieces, ENCODER_RATE, [self._reference(p) for p in profiles]))
        outputs = [job.output for job in jobs]
        if self.device.startswith("cuda"):  # on a CPU the pitch tracker runs each alone: 1.6x faster
            f0s = median_f0_many(outputs, sample_rate, self.device)
        else:
            f0s = [median_f0(output, sample_rate, self.device) for output in outputs]
        scores = []
        for job, f0_output in zip(jobs, f0s, strict=True):
            similarity, similarity_ge2e = next(ecapa), next(ge2e)
            base, base_ge2e = (next(ecapa), next(ge2e)) if job.matched else (None, None)
            scores.append(
                CloneScores(similarity, base, similarity_ge2e, base_ge2e, job.profile.f0_median_hz, f0_output)
            )
        return scores

    def _at_encoder_rate(self, pieces: list[np.ndarray], sample_rate: int) -> list[np.ndarray]:
        """The pieces at the 16 kHz both encoders embed, resampled once for both (each then skips its own).

        On a GPU as one padded batch there (the host's ``resample_poly`` was the largest share of the scoring on an
        H200: docs/benchmarks.md), the same filter to within 3e-7; on a CPU by scipy, which is faster there."""
        assert ENCODER_RATE == JUDGE_RATE
        if not self.device.startswith("cuda") or sample_rate == ENCODER_RATE:
            return [resample(piece, sample_rate, ENCODER_RATE) for piece in pieces]
        with torch.inference_mode():
            moved = resample_rows(padded_rows(pieces).to(self.device), sample_rate, ENCODER_RATE).cpu().numpy()
        lengths = [resampled_length(len(piece), sample_rate, ENCODER_RATE) for piece in pieces]
        return [np.ascontiguousarray(moved[row, :n]) for row, n in enumerate(lengths)]

    @staticmethod
    def _reference(profile: SpeakerProfile) -> torch.Tensor:
        assert profile.judge_embedding is not None, "VoiceStage embeds every prompt with the judge when it profiles it"
        return profile.judge_embedding

    def device_bytes(self) -> int:
        """What the judge holds on the device (the resource panel's figure)."""
        return self.judge.device_bytes()

    def unload(self) -> None:
        self.judge.unload()
        self._warmed.clear()
