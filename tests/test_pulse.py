"""The ``pulse`` renderer's WORLD in PyTorch against pyworld's own: the same envelope, aperiodicity and pulses.

The renderer exists to do on the device what the ``world`` renderer does on the host, so its three steps are held
to pyworld's numbers on real speech (CMU ARCTIC slt and awb): CheapTrick's envelope within 0.05 dB, D4C's
aperiodicity within 0.01, and the synthesis of the same parameters sample for sample over a voiced stretch (the
unvoiced ones are noise, drawn differently, and the pulses' phase after them with it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from voicelab.engine.voicing import resolve_renderer
from voicelab.errors import BackendLoadError
from voicelab.voice import pulse, world_analysis
from voicelab.voice.world import load_world

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module", params=["arctic_slt_en_female.wav", "arctic_awb_en_male.wav"])
def clip(request: pytest.FixtureRequest) -> tuple[np.ndarray, int, pulse.PulseFeatures]:
    audio, sr = sf.read(DATA / request.param, dtype="float32")
    features = pulse.analyse(torch.from_numpy(audio).unsqueeze(0), torch.tensor([len(audio)]), sr)
    return audio, sr, features


def _world_analysis(audio: np.ndarray, sr: int, f0: np.ndarray, hop: int) -> tuple[np.ndarray, np.ndarray]:
    world = load_world()
    x = audio.astype(np.float64)
    times = np.arange(len(f0)) * hop / sr
    size = world_analysis.cheaptrick_fft_size(sr)
    envelope = world.cheaptrick(x, f0, times, sr, fft_size=size)
    return envelope, world.d4c(x, f0, times, sr, fft_size=size)


def test_envelope_and_aperiodicity_equal_pyworlds(clip: tuple[np.ndarray, int, pulse.PulseFeatures]) -> None:
    audio, sr, features = clip
    f0 = features.f0[0].double().numpy()
    envelope, aperiodicity = _world_analysis(audio, sr, f0, features.hop)
    ours = features.envelope[0].double().numpy()
    heard = 10 * np.log10(envelope.max(axis=1)) > -100  # pyworld's near-silent frames are its own noise floor
    error_db = np.abs(10 * np.log10(ours[heard]) - 10 * np.log10(envelope[heard]))
    assert heard.mean() > 0.9
    assert error_db.max() < 0.05
    assert np.abs(features.aperiodicity[0].numpy() - aperiodicity).max() < 0.01
    assert (f0 > 0).mean() > 0.3  # the clip is speech, so D4C had voiced frames to measure


def test_synthesis_equals_pyworlds_where_voiced(clip: tuple[np.ndarray, int, pulse.PulseFeatures]) -> None:
    _, sr, features = clip
    run = _longest_voiced_run(features.f0[0].numpy() > 0)
    frames = slice(run.start + 1, run.stop - 1)  # voiced from its first sample: the pulses start in phase
    f0 = features.f0[0, frames].double().numpy() * 1.3
    envelope = features.envelope[0, frames].double().numpy()
    aperiodicity = np.full_like(envelope, 0.001)  # periodic throughout: nothing random where voiced
    theirs = load_world().synthesize(f0, envelope, aperiodicity, sr, features.hop * 1000.0 / sr)
    hop, n = features.hop, (len(f0) - 1) * features.hop
    fixed = pulse.PulseFeatures(
        torch.from_numpy(f0).float().unsqueeze(0),
        torch.from_numpy(envelope).float().unsqueeze(0),
        torch.full((1, *envelope.shape), 0.001),
        torch.tensor([n]),
        sr,
        hop,
    )
    ours = pulse.synthesise(fixed, fixed.f0, fixed.envelope)[0].numpy()
    voiced = slice(2 * hop, n - 2 * hop)  # WORLD extrapolates F0 past its last frame; here the frame is held
    assert voiced.stop - voiced.start > sr // 10
    error = ours[voiced] - theirs[voiced]
    assert np.sqrt(np.mean(error**2) / np.mean(theirs[voiced] ** 2)) < 0.02  # float32 here, float64 there


def _longest_voiced_run(voiced: np.ndarray) -> slice:
    edges = np.flatnonzero(np.diff(np.concatenate([[0], voiced.astype(int), [0]])))
    starts, stops = edges[::2], edges[1::2]
    k = int(np.argmax(stops - starts))
    return slice(int(starts[k]), int(stops[k]))


def test_a_batch_equals_each_row_alone(clip: tuple[np.ndarray, int, pulse.PulseFeatures]) -> None:
    audio, sr, _ = clip
    pieces = [audio, audio[: len(audio) // 2]]
    batch = torch.zeros(2, len(audio))
    for row, piece in enumerate(pieces):
        batch[row, : len(piece)] = torch.from_numpy(piece)
    lengths = torch.tensor([len(p) for p in pieces])
    both = pulse.analyse(batch, lengths, sr)
    half = pulse.analyse(batch[1:, : len(pieces[1])], lengths[1:], sr)
    frames = half.f0.shape[1]
    assert torch.equal(both.f0[1, :frames], half.f0[0])
    assert torch.allclose(both.envelope[1, :frames], half.envelope[0], rtol=1e-4, atol=1e-12)
    moved = pulse.synthesise(both, both.f0 * 1.2, both.envelope, seed=3)
    alone = pulse.synthesise(half, half.f0 * 1.2, half.envelope, seed=3)
    assert torch.allclose(moved[1, : len(pieces[1])], alone[0], atol=1e-4)


def test_auto_is_pulse_on_a_gpu_and_world_on_the_cpu() -> None:
    assert resolve_renderer("auto", "cuda") == resolve_renderer("auto", "cuda:1") == "pulse"
    assert resolve_renderer("auto", "cpu") == "world"
    assert resolve_renderer("world", "cuda") == "world" and resolve_renderer("pulse", "cpu") == "pulse"
    with pytest.raises(BackendLoadError, match=r"Unknown voice renderer 'wrld'; use auto, torch, .* or pulse[.]$"):
        resolve_renderer("wrld", "cpu")


def test_a_seed_moves_only_the_noise_and_zero_is_what_requests_get(
    clip: tuple[np.ndarray, int, pulse.PulseFeatures],
) -> None:
    """``apply_transform(..., seed=)`` (``eval clone --seed``): 0 is the engine's rendering; another seed draws other
    noise in the unvoiced and aperiodic parts, a small share of the take, and moves nothing else."""
    from voicelab.voice.dsp import VoiceTransform, apply_transform

    audio, sr, _ = clip
    higher = VoiceTransform(pitch_semitones=2.0)
    default = apply_transform(audio, sr, higher, renderer="pulse")
    assert np.array_equal(apply_transform(audio, sr, higher, renderer="pulse", seed=0), default)
    other = apply_transform(audio, sr, higher, renderer="pulse", seed=5)
    difference = float(np.sqrt(np.mean((other - default) ** 2)) / np.sqrt(np.mean(default**2)))
    assert 0.0 < difference < 0.5, difference


def test_aperiodicity_of_the_voiced_frames_alone_equals_every_frames(
    clip: tuple[np.ndarray, int, pulse.PulseFeatures],
) -> None:
    """Off a GPU D4C measures only the frames with an F0 (the rest are aperiodic by definition); the values are
    those of measuring every frame, as the GPU's fixed shapes do."""
    audio, sr, features = clip
    x = torch.from_numpy(audio).unsqueeze(0)
    x = torch.nn.functional.pad(x, (0, features.f0.shape[1] * features.hop - x.shape[1]))
    positions = (torch.arange(features.f0.shape[1]) * features.hop / sr).expand_as(features.f0).float()
    size, lengths = world_analysis.cheaptrick_fft_size(sr), torch.tensor([len(audio)])
    args = (x, lengths, sr, features.f0, positions, size)
    voiced_only, every = world_analysis.d4c(*args, every_frame=False), world_analysis.d4c(*args, every_frame=True)
    assert (features.f0 <= 0).float().mean() > 0.1  # there were unvoiced frames to skip
    torch.testing.assert_close(voiced_only, every, atol=1e-6, rtol=1e-5)
    assert torch.equal(voiced_only, features.aperiodicity)  # what ``analyse`` gives on a CPU
