"""Batching with the real English voice: two different requests in one padded batch say exactly what each says
alone (same seed, same audio within float tolerance), chunk for chunk; a job that fails leaves its batch-mate."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.gpu_needs import ECAPA, GE2E
from voicelab.backends.base import AudioChunk
from voicelab.engine.core import EngineCore
from voicelab.engine.messages import SynthesisRequest, SynthesisResult
from voicelab.errors import InvalidTextError
from voicelab.instruct.style import Style
from voicelab.settings import Settings
from voicelab.voice.intake import load_prompt

# Different text, length, seed, speed, noise and sentence silence: nothing about the two rows is shared.
REQUESTS = (
    SynthesisRequest("Good morning. The coffee is ready on the kitchen table.", language="en", seed=3),
    SynthesisRequest(
        "Could you close the window, please?",
        language="en",
        seed=8,
        speed=1.25,
        options={"noise_scale": 0.4},
        sentence_silence_s=0.4,
    ),
)


def run_together(
    core: EngineCore, requests: tuple[SynthesisRequest, ...]
) -> tuple[dict[int, list[AudioChunk]], dict[int, SynthesisResult | Exception]]:
    chunks: dict[int, list[AudioChunk]] = {i: [] for i in range(len(requests))}
    outcomes: dict[int, SynthesisResult | Exception] = {}

    def done(i: int, outcome: SynthesisResult | Exception) -> None:
        assert i not in outcomes, "a job was answered twice"
        outcomes[i] = outcome

    core.run_batch(requests, lambda i, chunk, _elapsed: chunks[i].append(chunk), done)
    return chunks, outcomes


def assert_batch_equals_alone(core: EngineCore, atol: float) -> None:
    alone = [core.run(request) for request in REQUESTS]
    chunks, outcomes = run_together(core, REQUESTS)
    assert alone[0].duration_s != pytest.approx(alone[1].duration_s, abs=0.1)  # really two different requests
    for i, solo in enumerate(alone):
        together = outcomes[i]
        assert isinstance(together, SynthesisResult)
        assert together.batch_size == 2 and solo.batch_size == 1
        assert together.chunks == solo.chunks == len(chunks[i])
        assert together.audio.shape == solo.audio.shape
        np.testing.assert_allclose(together.audio, solo.audio, atol=atol)
        np.testing.assert_array_equal(np.concatenate([c.audio for c in chunks[i]]), together.audio)


@pytest.fixture(scope="module")
def cpu_core() -> Iterator[EngineCore]:
    core = EngineCore(Settings(backend="piper", device="cpu"))
    yield core
    core.close()


def test_two_different_requests_in_one_batch_equal_each_run_alone(cpu_core: EngineCore) -> None:
    assert_batch_equals_alone(cpu_core, atol=1e-4)


def test_a_job_that_fails_fails_alone_and_its_batch_mate_is_unchanged(cpu_core: EngineCore) -> None:
    too_long = SynthesisRequest("word " * 2000, language="en", seed=1)
    alone = cpu_core.run(REQUESTS[1])
    _, outcomes = run_together(cpu_core, (too_long, REQUESTS[1]))
    assert isinstance(outcomes[0], InvalidTextError)
    survivor = outcomes[1]
    assert isinstance(survivor, SynthesisResult)
    np.testing.assert_allclose(survivor.audio, alone.audio, atol=1e-4)


@pytest.mark.gpu
def test_on_the_gpu_two_requests_in_one_batch_equal_each_run_alone() -> None:
    # Graphs off: the batch and the lone run take the same eager kernels' arithmetic, so equality is strict.
    core = EngineCore(Settings(backend="piper", device="cuda", cuda_graphs=False))
    try:
        assert_batch_equals_alone(core, atol=2e-3)
    finally:
        core.close()


@pytest.mark.gpu
def test_on_the_gpu_with_graphs_a_batch_says_what_each_says_alone() -> None:
    """Graphs pad to different buckets alone and together, so a rounded duration may move by a frame."""
    core = EngineCore(Settings(backend="piper", device="cuda", cuda_graphs=True))
    try:
        for _ in range(2):  # capture first, then replay
            alone = [core.run(request) for request in REQUESTS]
            _, outcomes = run_together(core, REQUESTS)
        for i, solo in enumerate(alone):
            together = outcomes[i]
            assert isinstance(together, SynthesisResult) and together.batch_size == 2
            assert abs(len(together.audio) - len(solo.audio)) <= 2 * 256
            n = min(len(together.audio), len(solo.audio))
            assert np.corrcoef(together.audio[:n], solo.audio[:n])[0, 1] > 0.99
    finally:
        core.close()


@pytest.fixture(scope="module", params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def voicing_core(request: pytest.FixtureRequest) -> Iterator[EngineCore]:
    """CPU: rendered row by row, scored in one encoder batch; CUDA: rendered as one padded batch too."""
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with CUDA; this machine has none")
    core = EngineCore(Settings(backend="piper", device=request.param, voice_renderer="torch", torch_threads=1))
    yield core
    core.close()


@GE2E
@ECAPA
def test_a_batch_of_voiced_requests_is_voiced_and_scored_together_and_equals_each_alone(
    voicing_core: EngineCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two cloned requests, one with a style, in one batch: each device batch's chunks go through the voice
    transform as one padded batch and the finished jobs through the speaker encoder as one batch (a cloned request
    on the H200 did not batch at all: 0.98x at 8 clients); what each job hears and is told equals it alone."""
    prompt = load_prompt(Path(__file__).parent / "data" / "arctic_slt_en_female.wav")
    clone = SynthesisRequest("The garden looks lovely. The birds are back.", language="en", seed=5, prompt=prompt)
    styled = SynthesisRequest(  # the same voice, a style on top: two jobs with a profile in one batch
        "Please speak a little higher. The bees are back.",
        language="en",
        seed=9,
        prompt=prompt,
        style=Style(pitch_semitones=3.0),
    )
    requests = (clone, styled)
    alone = [voicing_core.run(request) for request in requests]  # builds and caches the clone's profile
    encoder = voicing_core.voice.matcher.encoder
    calls: list[int] = []
    embed = encoder.embed_batch
    monkeypatch.setattr(encoder, "embed_batch", lambda pieces: calls.append(len(pieces)) or embed(pieces))
    _, outcomes = run_together(voicing_core, requests)
    assert calls == [4], "both jobs' outputs and drafts in one encoder call (alone: two calls of two)"
    for solo, together in zip(alone, (outcomes[0], outcomes[1]), strict=True):
        assert isinstance(together, SynthesisResult) and together.batch_size == 2
        assert together.audio.shape == solo.audio.shape
        assert np.corrcoef(together.audio, solo.audio)[0, 1] > 0.999
        assert together.similarity == pytest.approx(solo.similarity, abs=0.01)
        assert together.similarity_base == pytest.approx(solo.similarity_base, abs=0.01)
        assert together.f0_output_hz == pytest.approx(solo.f0_output_hz, rel=0.02)
    assert alone[1].f0_output_hz > alone[0].f0_output_hz * 1.1  # the style really moved the second one
