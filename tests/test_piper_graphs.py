"""CUDA graphs over bucketed shapes: padding a stage's input to its bucket changes nothing a listener hears
(checked on CPU, where the padded stages run eagerly), and on a GPU the graphed voice says what the eager one
says, with every bucket's memory and timings reported and graphs kept only where they were faster."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

from voicelab.backends.base import SpeechRequest
from voicelab.backends.cuda_graphs import bucket_for
from voicelab.backends.piper.backend import PiperBackend, VitsControls
from voicelab.backends.piper.graphs import Buckets
from voicelab.backends.piper.model import VitsModel

TEXT = "The committee will meet again on Thursday at half past three."


@pytest.fixture(scope="module")
def cpu_voice() -> Iterator[PiperBackend]:
    voice = PiperBackend()
    voice.load("cpu", "float32")
    yield voice
    voice.unload()


def model_of(voice: PiperBackend) -> VitsModel:
    model = voice._model
    assert model is not None
    return model


def test_buckets_take_the_smallest_that_holds_and_none_past_the_largest() -> None:
    buckets = Buckets()
    assert bucket_for(buckets.rows, 1) == 1 and bucket_for(buckets.rows, 3) == 4 and bucket_for(buckets.rows, 16) == 16
    assert bucket_for(buckets.rows, 17) is None
    assert bucket_for(buckets.tokens, 33) == 64


@torch.inference_mode()
def test_padding_the_encoder_input_to_its_bucket_leaves_the_durations_and_priors_unchanged(
    cpu_voice: PiperBackend,
) -> None:
    model = model_of(cpu_voice)
    ids = torch.tensor([cpu_voice.frontend.sentences(TEXT)[0].ids])
    t = ids.shape[1]
    noise = torch.randn(1, 2, t, generator=torch.Generator().manual_seed(0)) * 0.8
    mask = torch.ones(1, 1, t)
    durations, m_p, logs_p = model.encode(ids, mask, noise, 1.0)
    # The graph's bucket: 4 rows of 128 ids, the real row first, dummy rows of length 1, scale as a tensor.
    padded_ids = torch.zeros(4, 128, dtype=torch.long)
    padded_ids[0, :t] = ids[0]
    lengths = torch.tensor([t, 1, 1, 1])
    padded_mask = (torch.arange(128) < lengths.unsqueeze(1)).unsqueeze(1).float()
    padded_noise = torch.zeros(4, 2, 128)
    padded_noise[0, :, :t] = noise[0]
    p_durations, p_m, p_logs = model.encode(padded_ids, padded_mask, padded_noise, torch.ones(4))
    assert torch.equal(p_durations[0, :t], durations[0])
    assert int(p_durations[0, t:].sum()) == 0  # padding adds no frames
    torch.testing.assert_close(p_m[0, :, :t], m_p[0], atol=1e-4, rtol=0)
    torch.testing.assert_close(p_logs[0, :, :t], logs_p[0], atol=1e-4, rtol=0)


@torch.inference_mode()
def test_padding_the_decoder_input_to_its_bucket_leaves_the_audio_unchanged(cpu_voice: PiperBackend) -> None:
    model = model_of(cpu_voice)
    frames = 173
    z_p = torch.randn(1, model.dims.inter_channels, frames, generator=torch.Generator().manual_seed(1))
    audio = model.decode(z_p, torch.ones(1, 1, frames), ragged=False)
    padded = torch.zeros(2, model.dims.inter_channels, 256)
    padded[0, :, :frames] = z_p[0]
    lengths = torch.tensor([frames, 1])
    mask = (torch.arange(256) < lengths.unsqueeze(1)).unsqueeze(1).float()
    padded_audio = model.decode(padded, mask, ragged=True)
    samples = frames * model.dims.hop_length
    np.testing.assert_allclose(padded_audio[0, 0, :samples].numpy(), audio[0, 0].numpy(), atol=1e-4)


@pytest.mark.gpu
def test_on_the_gpu_graphed_voice_says_what_the_eager_voice_says_and_reports_its_buckets() -> None:
    eager, graphed = PiperBackend(cuda_graphs=False), PiperBackend(cuda_graphs=True)
    eager.load("cuda", "float32")
    graphed.load("cuda", "float32")
    request = SpeechRequest(TEXT + " Please remember to water the plants.", "en", seed=4)
    for _ in range(2):  # the first run captures the buckets (and times them), the second replays the kept ones
        chunks = [c.audio for c in graphed.synthesize(request)]
    expected = [c.audio for c in eager.synthesize(request)]
    assert len(chunks) == len(expected)
    for got, want in zip(chunks, expected, strict=True):
        assert abs(len(got) - len(want)) <= 2 * 256  # a rounded duration may differ by a frame, no more
        n = min(len(got), len(want))
        assert np.corrcoef(got[:n], want[:n])[0, 1] > 0.99
    buckets = graphed.graph_buckets()
    assert {b.stage for b in buckets} == {"encode", "decode"}
    assert all(b.bytes >= 0 and b.eager_ms > 0 and b.graph_ms > 0 for b in buckets)
    assert all(b.kept == (b.graph_ms < b.eager_ms) for b in buckets)
    (short,) = graphed.synthesize_ids([[1, 0, 5, 0, 17, 0, 2]], VitsControls(1.0, 0.0, 0.0), None)
    assert len(short) > 0 and np.isfinite(short).all()
