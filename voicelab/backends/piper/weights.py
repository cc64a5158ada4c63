"""Load a Piper voice's ONNX initializers into VitsModel, strictly (every parameter accounted for).

Most initializers keep their PyTorch names (``dec.ups.0.weight``). The exporter renames some:
weight-normed convs become ``onnx::Conv_1234`` and the text embedding may be called ``sid``; those are
named by the graph node that consumes them (``/flow/flows.0/enc/in_layers.0/Conv`` input 1 is
``flow.flows.0.enc.in_layers.0.weight``). One was constant-folded: the duration predictor's first flow
stores exp(-logs) as ``/dp/flows.0/Exp_output_0``, turned back into ``logs`` here. Everything else is a
small graph constant (shapes, pads, epsilons) and ignored.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from voicelab.backends.piper.converted import read_converted
from voicelab.backends.piper.model import VitsDims, VitsModel
from voicelab.backends.strict_loading import load_state_strictly
from voicelab.errors import BackendLoadError

logger = logging.getLogger(__name__)

_PARAMETER_NAME = re.compile(r"^[A-Za-z_]\w*(\.\w+)+$")
_PARAMETER_INPUTS = {("Conv", 1): "weight", ("Conv", 2): "bias", ("ConvTranspose", 1): "weight"}
_PARAMETER_INPUTS |= {("ConvTranspose", 2): "bias", ("Gather", 0): "weight"}
_MAX_CONSTANT_SIZE = 16  # larger unnamed initializers must be weights we know how to place


@dataclass(frozen=True)
class ConvSpec:
    """The attributes of one exported Conv/ConvTranspose node."""

    stride: int
    dilation: int


@dataclass(frozen=True)
class VoiceWeights:
    """State-dict-named tensors plus the conv attributes that shapes alone don't give."""

    tensors: dict[str, torch.Tensor]
    convs: dict[str, ConvSpec]


def read_voice_weights(path: str | Path) -> VoiceWeights:
    """Read every weight from a Piper ``.onnx`` file; raises BackendLoadError with one sentence."""
    path = Path(path)
    if not path.is_file():
        raise BackendLoadError(f"The voice model {path} does not exist.")
    if path.suffix == ".pt":
        converted, pairs = read_converted(path)
        return VoiceWeights(converted, {name: ConvSpec(*pair) for name, pair in pairs.items()})
    try:
        graph = onnx.load(str(path)).graph
    except Exception as exc:  # onnx raises protobuf DecodeError, ValueError or OSError for bad files
        logger.warning("cannot parse voice model %s: %s", path, exc)
        raise BackendLoadError(f"The voice model {path.name} is not a readable ONNX file; it may be corrupt.") from exc

    consumers: dict[str, list[tuple[str, str, int]]] = {}
    convs: dict[str, ConvSpec] = {}
    for node in graph.node:
        for index, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node.name, node.op_type, index))
        if node.op_type in ("Conv", "ConvTranspose"):
            attrs = {a.name: list(a.ints) for a in node.attribute}
            convs[_module_path(node.name)] = ConvSpec(attrs.get("strides", [1])[0], attrs.get("dilations", [1])[0])

    tensors: dict[str, torch.Tensor] = {}
    for init in graph.initializer:
        array = numpy_helper.to_array(init)
        name, value = _state_name(init.name, array, consumers.get(init.name, []))
        if name is None:
            if array.size > _MAX_CONSTANT_SIZE:
                raise BackendLoadError(f"The voice model {path} has a weight this loader does not know: {init.name}.")
            continue
        if name in tensors:
            raise BackendLoadError(f"The voice model {path} has two tensors for {name}.")
        tensors[name] = torch.from_numpy(np.array(value, dtype=np.float32))
    if not tensors:
        raise BackendLoadError(f"The voice model {path} has no weights; it is empty or not a Piper voice.")
    logger.debug("read %d weights and %d conv specs from %s", len(tensors), len(convs), path)
    return VoiceWeights(tensors=tensors, convs=convs)


def _module_path(node_name: str) -> str:
    """'/flow/flows.0/enc/in_layers.0/Conv' -> 'flow.flows.0.enc.in_layers.0'."""
    return ".".join(node_name.strip("/").split("/")[:-1])


def _state_name(name: str, array: np.ndarray, consumers: list[tuple[str, str, int]]) -> tuple[str | None, np.ndarray]:
    """The state-dict name of one initializer (None for a graph constant) and its value."""
    if _PARAMETER_NAME.match(name):
        return name, array
    named_by_graph = [p for p in (_consumer_param(c) for c in consumers) if p is not None]
    if named_by_graph and all(p == named_by_graph[0] for p in named_by_graph):
        return named_by_graph[0], array
    # ElementwiseAffine's reverse multiplies by exp(-logs); exporters fold the constant part of that.
    folded = re.fullmatch(r"/(.+)/Exp_output_0", name)
    if folded and any(op == "Mul" for _, op, _ in consumers) and np.all(array > 0):
        return folded.group(1).replace("/", ".") + ".logs", -np.log(array)  # stored exp(-logs)
    exp_of = [node for node, op, index in consumers if op == "Exp" and index == 0]
    if exp_of and node_scope_is_single(exp_of):
        return _module_path(exp_of[0]) + ".logs", -array  # stored -logs
    return None, array


def node_scope_is_single(nodes: list[str]) -> bool:
    return len({_module_path(n) for n in nodes}) == 1 and nodes[0].startswith("/")


def _consumer_param(consumer: tuple[str, str, int]) -> str | None:
    node_name, op_type, index = consumer
    suffix = _PARAMETER_INPUTS.get((op_type, index))
    if suffix is None or not node_name.startswith("/"):
        return None
    return f"{_module_path(node_name)}.{suffix}"


def infer_dims(weights: VoiceWeights, num_speakers: int = 1) -> VitsDims:
    """Every VitsDims field from tensor shapes and conv attributes; BackendLoadError names what is missing."""
    t, convs = weights.tensors, weights.convs

    def shape(name: str) -> tuple[int, ...]:
        if name not in t:
            raise BackendLoadError(f"The voice model is missing the tensor {name}.")
        return tuple(t[name].shape)

    def count(prefix: str) -> int:
        pattern = re.compile(re.escape(prefix) + r"\.(\d+)\.")
        return len({m.group(1) for m in (pattern.match(k) for k in t) if m})

    def dilation(module: str) -> int:
        return convs[module].dilation if module in convs else 1

    n_vocab, hidden = shape("enc_p.emb.weight")
    _, rel_positions, k_channels = shape("enc_p.encoder.attn_layers.0.emb_rel_k")
    filter_channels, _, ffn_kernel = shape("enc_p.encoder.ffn_layers.0.conv_1.weight")
    dp_flow_ids = sorted(int(m.group(1)) for k in t if (m := re.match(r"dp\.flows\.(\d+)\.proj\.weight$", k)))
    if not dp_flow_ids:
        raise BackendLoadError("The voice model has no stochastic duration predictor; this loader needs one.")
    n_ups = count("dec.ups")
    resblock = "1" if "dec.resblocks.0.convs1.0.weight" in t else "2"
    conv_group = "convs1" if resblock == "1" else "convs"
    per_stage = count("dec.resblocks") // max(n_ups, 1)
    blocks = [f"dec.resblocks.{j}.{conv_group}" for j in range(per_stage)]
    speakers = shape("emb_g.weight") if "emb_g.weight" in t else (max(num_speakers, 1), 0)
    return VitsDims(
        n_vocab=n_vocab,
        hidden_channels=hidden,
        inter_channels=shape("enc_p.proj.weight")[0] // 2,
        filter_channels=filter_channels,
        n_heads=hidden // k_channels,
        n_layers=count("enc_p.encoder.attn_layers"),
        ffn_kernel_size=ffn_kernel,
        window_size=(rel_positions - 1) // 2,
        dp_kernel_size=shape("dp.convs.convs_sep.0.weight")[2],
        dp_n_flows=len(dp_flow_ids) + 1,  # flows.1 is dropped at export
        dp_num_bins=(shape(f"dp.flows.{dp_flow_ids[0]}.proj.weight")[0] + 1) // 3,
        dp_tail_bound=5.0,
        flow_n_flows=count("flow.flows"),
        flow_kernel_size=shape("flow.flows.0.enc.in_layers.0.weight")[2],
        flow_dilation_rate=dilation("flow.flows.0.enc.in_layers.1"),
        flow_n_layers=count("flow.flows.0.enc.in_layers"),
        resblock=resblock,
        resblock_kernel_sizes=tuple(shape(f"{b}.0.weight")[2] for b in blocks),
        resblock_dilation_sizes=tuple(tuple(dilation(f"{b}.{i}") for i in range(count(b))) for b in blocks),
        upsample_rates=tuple(convs[f"dec.ups.{i}"].stride for i in range(n_ups)),
        upsample_initial_channel=shape("dec.conv_pre.weight")[0],
        upsample_kernel_sizes=tuple(shape(f"dec.ups.{i}.weight")[2] for i in range(n_ups)),
        n_speakers=speakers[0],
        gin_channels=speakers[1],
    )


def load_state(model: VitsModel, tensors: dict[str, torch.Tensor]) -> None:
    """Copy tensors into the model, as nanoGPT's from_pretrained does: same keys, same shapes, strict."""
    load_state_strictly(model, tensors, "The voice model's weights do not fit the Piper VITS model")


def load_model(path: str | Path, num_speakers: int = 1) -> VitsModel:
    """Build a VitsModel for the voice at ``path`` and load its weights (float32, CPU, eval mode)."""
    weights = read_voice_weights(path)
    dims = infer_dims(weights, num_speakers)
    logger.info("piper voice %s: %s", Path(path).name, dims)
    model = VitsModel(dims)
    load_state(model, weights.tensors)
    return model.eval().requires_grad_(False)
