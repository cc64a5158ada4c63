"""Load the shipped FastSpeech2 and Multi-band MelGAN .tflite files into our PyTorch models, strictly.

tflite_graph.read_parameters gives every parameter as ``<tf layer>/<role>`` (int8 and float16 already
de-quantised with their scales and zero points). Here a table of patterns renames TF layers to module
paths, kernels are transposed to PyTorch's layout (TFLite convs are [out, 1, k, in], transposed convs
[out, k, 1, in], dense layers [out, in]), and a conv's placeholder bias inside the op is added to the
bias the graph adds after it. Every tensor must find its place and every model parameter must be
filled, as nanoGPT's from_pretrained insists: otherwise BackendLoadError names the tensor.
The weights are trained on the Baker corpus, licensed for non-commercial use only.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
from torch import nn

from voicelab.backends.mandarin.model import FastSpeech2, FastSpeech2Dims
from voicelab.backends.mandarin.tflite_graph import GraphParameters, read_parameters
from voicelab.backends.mandarin.vocoder import MelGANDims, MultiBandMelGAN
from voicelab.backends.strict_loading import load_state_strictly
from voicelab.errors import BackendLoadError

logger = logging.getLogger(__name__)

Rule = tuple[str, str]
ModelT = TypeVar("ModelT", bound=nn.Module)
_LAYER = r"(encoder|decoder)/layer_\._(\d+)"
_PREDICTOR = r"(duration|f0|energy)_predictor"
FASTSPEECH2_RULES: tuple[Rule, ...] = (
    (r"embeddings", "embedding"),
    (r"embeddings/position_embeddings", "positions"),
    (_LAYER + r"/attention/self/(query|key|value)", r"\1.layers.\2.attention.\3"),
    (_LAYER + r"/attention/output/dense", r"\1.layers.\2.attention.out"),
    (_LAYER + r"/attention/output", r"\1.layers.\2.attention.norm"),
    (_LAYER + r"/intermediate/conv1d_(1|2)", r"\1.layers.\2.ffn.conv\3"),
    (_LAYER + r"/output", r"\1.layers.\2.ffn.norm"),
    (_PREDICTOR + r"/sequential_\d+/conv_\._(\d+)", r"variance.\1_predictor.convs.\2"),
    (_PREDICTOR + r"/sequential_\d+/LayerNorm_\._(\d+)", r"variance.\1_predictor.norms.\2"),
    (_PREDICTOR + r"/dense_\d+", r"variance.\1_predictor.proj"),
    (r"(f0|energy)_embeddings", r"variance.\1_embedding"),
    (r"mel_before", "mel_linear"),
    (r"postnet/conv_\._(\d+)", r"postnet.convs.\1"),
    (r"postnet/batch_norm_\._(\d+)", r"postnet.norms.\1"),
)
_STACK = r"sequential_\d+/residual_stack_\._(\d+)\._\._(\d+)"
MELGAN_RULES: tuple[Rule, ...] = (
    (r"sequential_\d+/conv1d", "first_conv"),
    (r"sequential_\d+/conv_transpose_\._(\d+)/conv2d_transpose(_\d+)?", r"stages.\1.upsample"),
    (_STACK + r"/shortcut", r"stages.\1.stacks.\2.shortcut"),
    (_STACK + r"/conv1d_\d+:k1", r"stages.\1.stacks.\2.pointwise"),
    (_STACK + r"/conv1d_\d+", r"stages.\1.stacks.\2.dilated"),
    (r"sequential_\d+/conv1d_\d+", "last_conv"),
    (r"conv1d_transpose", "pqmf.upsample"),
    (r"conv1d", "pqmf.filter"),
)
_ROLE_SUFFIX = {"kernel": "weight", "bias": "bias", "gamma": "weight", "beta": "bias", "scale": "scale"}
_ROLE_SUFFIX |= {"shift": "shift", "table": "weight"}


def to_state_dict(params: GraphParameters, rules: tuple[Rule, ...], tables: dict[str, str]) -> dict[str, torch.Tensor]:
    """``<tf layer>/<role>`` arrays -> state-dict tensors; BackendLoadError names a layer no rule places."""
    state: dict[str, np.ndarray] = {}
    inline: dict[str, np.ndarray] = {}
    for key, value in params.arrays.items():
        layer, role = key.rsplit("/", 1)
        module = _rename(layer, _kernel_tag(params, layer), rules)
        if role == "inline_bias":
            inline[module] = value
            continue
        suffix = tables.get(module, _ROLE_SUFFIX[role]) if role == "table" else _ROLE_SUFFIX[role]
        name = f"{module}.{suffix}"
        if name in state:
            raise BackendLoadError(f"The model file has two tensors for {name}.")
        state[name] = _to_torch_layout(value, role, layer in params.strides)
    for module, value in inline.items():  # the conv op's own bias (often shared zeros) adds to the graph's
        state[f"{module}.bias"] = state[f"{module}.bias"] + value if f"{module}.bias" in state else value
    return {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for k, v in state.items()}


def _kernel_tag(params: GraphParameters, layer: str) -> str:
    """':k1' for a layer whose conv kernel has width 1 (tells a stack's pointwise conv from its dilated one)."""
    kernel = params.arrays.get(f"{layer}/kernel")
    return ":k1" if kernel is not None and kernel.ndim == 4 and kernel.shape[1] * kernel.shape[2] == 1 else ""


def _rename(layer: str, tag: str, rules: tuple[Rule, ...]) -> str:
    for pattern, target in rules:
        if tag and re.fullmatch(pattern, layer + tag):
            return re.sub(pattern, target, layer + tag)
        if re.fullmatch(pattern, layer):
            return re.sub(pattern, target, layer)
    raise BackendLoadError(f"The model file has a layer this loader does not know: {layer}.")


def _to_torch_layout(value: np.ndarray, role: str, transposed: bool) -> np.ndarray:
    if role != "kernel" or value.ndim != 4:
        return value  # dense [out, in] is already nn.Linear's layout
    if transposed:  # [out, k, 1, in] or [out, 1, k, in] -> ConvTranspose1d [in, out, k]
        return value.reshape(value.shape[0], -1, value.shape[3]).transpose(2, 0, 1)
    return value[:, 0].transpose(0, 2, 1)  # [out, 1, k, in] -> Conv1d [out, in, k]


def load_state(model: nn.Module, tensors: dict[str, torch.Tensor], what: str) -> None:
    """Copy tensors into the model: same keys, same shapes, strict; BackendLoadError lists what differs."""
    load_state_strictly(model, tensors, f"The {what} weights do not fit the model")


def _shape(tensors: dict[str, torch.Tensor], name: str) -> tuple[int, ...]:
    if name not in tensors:
        raise BackendLoadError(f"The model file is missing the tensor {name}.")
    return tuple(tensors[name].shape)


def _count(tensors: dict[str, torch.Tensor], prefix: str) -> int:
    pattern = re.compile(re.escape(prefix) + r"\.(\d+)\.")
    return len({m.group(1) for m in (pattern.match(k) for k in tensors) if m})


def infer_fastspeech2_dims(t: dict[str, torch.Tensor], n_heads: int) -> FastSpeech2Dims:
    """Every FastSpeech2Dims field from tensor shapes (the head count comes from the graph's reshape)."""
    n_vocab, hidden = _shape(t, "embedding.weight")
    qkv = _shape(t, "encoder.layers.0.attention.query.weight")[0]
    ffn, _, ffn_kernel = _shape(t, "encoder.layers.0.ffn.conv1.weight")
    predictor, _, predictor_kernel = _shape(t, "variance.duration_predictor.convs.0.weight")
    postnet_channels, n_mels, postnet_kernel = _shape(t, "postnet.convs.0.weight")
    return FastSpeech2Dims(
        n_vocab=n_vocab,
        hidden=hidden,
        n_heads=n_heads,
        head_dim=qkv // n_heads,
        encoder_layers=_count(t, "encoder.layers"),
        decoder_layers=_count(t, "decoder.layers"),
        ffn_channels=ffn,
        ffn_kernel=ffn_kernel,
        predictor_channels=predictor,
        predictor_kernel=predictor_kernel,
        predictor_layers=_count(t, "variance.duration_predictor.convs"),
        variance_embedding_kernel=_shape(t, "variance.f0_embedding.weight")[2],
        n_mels=n_mels,
        postnet_channels=postnet_channels,
        postnet_kernel=postnet_kernel,
        postnet_layers=_count(t, "postnet.convs"),
        max_positions=_shape(t, "positions.table")[0] - 1,
    )


def infer_melgan_dims(t: dict[str, torch.Tensor]) -> MelGANDims:
    """Every MelGANDims field from tensor shapes: an upsampling kernel of 2s means scale s."""
    channels, n_mels, kernel = _shape(t, "first_conv.weight")
    n_stages = _count(t, "stages")
    scales = tuple(_shape(t, f"stages.{i}.upsample.weight")[2] // 2 for i in range(n_stages))
    return MelGANDims(
        n_mels=n_mels,
        channels=channels,
        kernel_size=kernel,
        upsample_scales=scales,
        stacks=_count(t, "stages.0.stacks"),
        stack_kernel=_shape(t, "stages.0.stacks.0.dilated.weight")[2],
        n_bands=_shape(t, "last_conv.weight")[0],
        pqmf_taps=_shape(t, "pqmf.filter.weight")[2] - 1,
    )


def fastspeech2_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    return to_state_dict(read_parameters(path), FASTSPEECH2_RULES, {"positions": "table"})


def melgan_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    return to_state_dict(read_parameters(path), MELGAN_RULES, {})


def load_fastspeech2(path: str | Path, n_heads: int = 2) -> FastSpeech2:
    """FastSpeech2 for the .tflite at ``path``, weights loaded strictly (float32, CPU, eval mode)."""
    return _build(fastspeech2_tensors(path), lambda t: FastSpeech2(infer_fastspeech2_dims(t, n_heads)), "FastSpeech2")


def load_melgan(path: str | Path) -> MultiBandMelGAN:
    """Multi-band MelGAN for the .tflite at ``path``, weights loaded strictly (float32, CPU, eval mode)."""
    return _build(melgan_tensors(path), lambda t: MultiBandMelGAN(infer_melgan_dims(t)), "Multi-band MelGAN")


def _build(tensors: dict[str, torch.Tensor], make: Callable[[dict[str, torch.Tensor]], ModelT], what: str) -> ModelT:
    model = make(tensors)
    logger.info("%s: %s", what, getattr(model, "dims", None))
    load_state(model, tensors, what)
    return model.eval().requires_grad_(False)
