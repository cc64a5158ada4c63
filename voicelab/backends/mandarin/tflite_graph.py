"""Read the parameters of a TFLite flatbuffer, de-quantised to float32 and named by the layer that owns them.

A .tflite file keeps weights as constant tensors (buffers) consumed by ops. This module walks the ops,
not the names alone, because the converter names tensors loosely: a conv's placeholder bias may carry
another layer's name (shared, de-duplicated zeros), and a weight may gain a ``1`` suffix. Every constant
is classified by the op input that reads it:

* CONV_2D input 1 / TRANSPOSE_CONV input 1 / FULLY_CONNECTED input 1 -> ``<layer>/kernel``
* CONV_2D input 2 / TRANSPOSE_CONV input 3 / FULLY_CONNECTED input 2 -> ``<layer>/inline_bias``
* GATHER input 0 (embedding table)                                   -> ``<layer>/table``
* ADD/SUB/MUL operand named ``.../BiasAdd/...``, ``.../LayerNorm/...`` or ``.../batchnorm/...``
  -> ``<layer>/bias``, ``/gamma``, ``/beta``, ``/scale`` (folded BN) or ``/shift``

``<layer>`` is the owner named by the weight tensor (for a kernel, its parent path); a bias belongs
to the conv or dense layer whose output it is added to (the converter shares one buffer between
layers whose biases are equal, under one of their names). Any constant read in one of
these roles is a parameter, whatever its size. The rest with at most ``MAX_GRAPH_CONSTANT`` elements
are graph constants (shapes, epsilons, dropout rates) and skipped; a larger constant this scheme does
not place raises BackendLoadError naming it.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tflite

from voicelab.errors import BackendLoadError

logger = logging.getLogger(__name__)

MAX_GRAPH_CONSTANT = 16

_NUMPY_TYPES: dict[int, type[np.generic]] = {
    tflite.TensorType.FLOAT32: np.float32,
    tflite.TensorType.FLOAT16: np.float16,
    tflite.TensorType.INT32: np.int32,
    tflite.TensorType.INT64: np.int64,
    tflite.TensorType.INT8: np.int8,
    tflite.TensorType.UINT8: np.uint8,
    tflite.TensorType.INT16: np.int16,
    tflite.TensorType.BOOL: np.bool_,
}
# (op, input index) -> role of a constant read there
_INPUT_ROLES: dict[tuple[str, int], str] = {
    ("CONV_2D", 1): "kernel",
    ("CONV_2D", 2): "inline_bias",
    ("DEPTHWISE_CONV_2D", 1): "kernel",
    ("DEPTHWISE_CONV_2D", 2): "inline_bias",
    ("TRANSPOSE_CONV", 1): "kernel",
    ("TRANSPOSE_CONV", 3): "inline_bias",
    ("FULLY_CONNECTED", 1): "kernel",
    ("FULLY_CONNECTED", 2): "inline_bias",
    ("GATHER", 0): "table",
}
# suffix of an elementwise operand's name -> role (longest first: LayerNorm gamma before beta)
_NAMED_ROLES: tuple[tuple[str, str], ...] = (
    ("/BiasAdd/ReadVariableOp/resource", "bias"),
    ("/batchnorm/mul/ReadVariableOp/resource", "gamma"),
    ("/batchnorm/ReadVariableOp/resource", "beta"),
    ("/batchnorm/mul", "scale"),
    ("/batchnorm/sub", "shift"),
)
_ELEMENTWISE = frozenset({"ADD", "SUB", "MUL"})
_PASS_THROUGH = frozenset({"SQUEEZE", "RESHAPE", "EXPAND_DIMS"})


@dataclass
class GraphParameters:
    """``<layer>/<role>`` -> float32 array, plus the shapes the op options give (strides)."""

    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    strides: dict[str, int] = field(default_factory=dict)  # transpose-conv layer -> stride along time

    def add(self, key: str, value: np.ndarray, source: str) -> None:
        if key in self.arrays and not np.array_equal(self.arrays[key], value):
            raise BackendLoadError(f"The model file has two different tensors for {key} (one is {source}).")
        self.arrays[key] = value


def dequantize(raw: np.ndarray, tensor: tflite.Tensor) -> np.ndarray:
    """int8/uint8 with scales and zero points, or float16, -> float32; float32 passes through."""
    quant = tensor.Quantization()
    if raw.dtype in (np.int8, np.uint8, np.int16) and quant is not None and quant.ScaleLength() > 0:
        scale = quant.ScaleAsNumpy().astype(np.float32)
        zero = quant.ZeroPointAsNumpy().astype(np.float32) if quant.ZeroPointLength() else np.zeros_like(scale)
        if scale.size > 1:  # per-channel: broadcast along the quantised dimension
            shape = [1] * raw.ndim
            shape[quant.QuantizedDimension()] = scale.size
            scale, zero = scale.reshape(shape), zero.reshape(shape)
        return ((raw.astype(np.float32) - zero) * scale).astype(np.float32)
    return raw.astype(np.float32)


class TfliteGraph:
    """The first subgraph of a .tflite file: tensors, constants and ops, read with the ``tflite`` package."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise BackendLoadError(f"The model file {self.path} does not exist.")
        data = self.path.read_bytes()
        unreadable = BackendLoadError(f"The model file {self.path.name} is not a readable TFLite file.")
        if data[4:8] != b"TFL3":  # the flatbuffer file identifier of every TFLite model
            raise unreadable
        try:
            self.model = tflite.Model.GetRootAsModel(data, 0)
            graph = self.model.Subgraphs(0) if self.model.SubgraphsLength() else None
            self.op_names = [self._op_name(i) for i in range(self.model.OperatorCodesLength())]
        except (IndexError, ValueError, TypeError, AttributeError) as exc:  # flatbuffers raises these on junk
            raise unreadable from exc
        if graph is None:
            raise unreadable
        self.graph: tflite.SubGraph = graph

    def _op_name(self, index: int) -> str:
        code = self.model.OperatorCodes(index)
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        name: str = tflite.opcode2name(builtin)
        return f"{name}:{code.CustomCode().decode()}" if code.CustomCode() else name

    def tensor_name(self, index: int) -> str:
        return str(self.graph.Tensors(index).Name().decode())

    def constant(self, index: int) -> np.ndarray | None:
        """The de-quantised value of a constant tensor, or None for an activation."""
        tensor = self.graph.Tensors(index)
        buffer = self.model.Buffers(tensor.Buffer())
        if buffer is None or buffer.DataLength() == 0:
            return None
        dtype = _NUMPY_TYPES.get(tensor.Type())
        if dtype is None:
            raise BackendLoadError(f"The model file has a tensor of a type this loader cannot read: {index}.")
        shape = tuple(int(s) for s in tensor.ShapeAsNumpy()) if tensor.ShapeLength() else ()
        raw = np.frombuffer(buffer.DataAsNumpy().tobytes(), dtype=dtype).reshape(shape)
        return dequantize(raw, tensor)

    def ops(self) -> list[tuple[str, list[int], tflite.Operator]]:
        result = []
        for i in range(self.graph.OperatorsLength()):
            op = self.graph.Operators(i)
            inputs = [int(j) for j in op.InputsAsNumpy()] if op.InputsLength() else []
            result.append((self.op_names[op.OpcodeIndex()], inputs, op))
        return result


def owner(name: str, role: str) -> str:
    """The layer a constant belongs to: 'enc/l0/conv1d_1/conv1d1' (kernel) -> 'enc/l0/conv1d_1'."""
    name = name.split(";")[0]
    for suffix, named_role in _NAMED_ROLES:
        if role == named_role and name.endswith(suffix):
            return name[: -len(suffix)].removesuffix("/LayerNorm").rstrip("/") or name
    if role == "table":
        return re.sub(r"/Gather/resource$", "", name)
    if name.endswith("/Tensordot/MatMul"):  # a Dense layer's kernel
        return name.removesuffix("/Tensordot/MatMul")
    return name.rsplit("/", 1)[0] if "/" in name else name


def read_parameters(path: str | Path) -> GraphParameters:
    """Every parameter of the file as ``<layer>/<role>``; BackendLoadError names any constant left over."""
    graph = TfliteGraph(path)
    params = GraphParameters()
    placed: set[int] = set()
    kernel_owner: dict[int, str] = {}
    producers = _dequantize_producers(graph)
    made_by = {int(op.OutputsAsNumpy()[0]): (name, inputs) for name, inputs, op in graph.ops() if op.OutputsLength()}
    for op_name, inputs, op in graph.ops():
        for position, index in enumerate(inputs):
            if index < 0:
                continue
            source = producers.get(index, index)
            value = graph.constant(source)
            role = _role(op_name, position, graph.tensor_name(source))
            if value is None or role is None:
                continue
            if role == "inline_bias":
                layer = kernel_owner.get(id(op)) or _kernel_layer(graph, inputs, producers)
            elif role == "bias":  # by the layer whose output it is added to: identical biases share a buffer
                layer = _fed_by_layer(graph, inputs, position, made_by) or owner(graph.tensor_name(source), role)
            else:
                layer = owner(graph.tensor_name(source), role)
            if role == "kernel":
                kernel_owner[id(op)] = layer
                if op_name == "TRANSPOSE_CONV":
                    params.strides[layer] = _transpose_stride(op)
            params.add(f"{layer}/{role}", value, graph.tensor_name(source))
            placed.add(source)
    _check_all_placed(graph, placed)
    logger.debug("read %d parameters from %s", len(params.arrays), graph.path.name)
    return params


def _dequantize_producers(graph: TfliteGraph) -> dict[int, int]:
    """Activation tensors that are DEQUANTIZE(constant) -> that constant, so consumers see the weight."""
    producers: dict[int, int] = {}
    for op_name, inputs, op in graph.ops():
        if op_name == "DEQUANTIZE" and graph.constant(inputs[0]) is not None:
            producers[int(op.OutputsAsNumpy()[0])] = inputs[0]
    return producers


def _role(op_name: str, position: int, name: str) -> str | None:
    role = _INPUT_ROLES.get((op_name, position))
    if role is not None:
        return role
    if op_name in _ELEMENTWISE:
        for suffix, named_role in _NAMED_ROLES:
            if name.split(";")[0].endswith(suffix):
                return named_role
    return None


def _fed_by_layer(
    graph: TfliteGraph, inputs: list[int], position: int, made_by: dict[int, tuple[str, list[int]]]
) -> str | None:
    """The layer (conv or dense) whose output the other operand is, looking through reshapes; else None."""
    tensor = inputs[1 - position] if len(inputs) == 2 else -1
    for _ in range(4):
        if tensor not in made_by:
            return None
        op_name, op_inputs = made_by[tensor]
        if (op_name, 1) in _INPUT_ROLES and _INPUT_ROLES[(op_name, 1)] == "kernel":
            return owner(graph.tensor_name(op_inputs[1]), "kernel")
        if op_name not in _PASS_THROUGH:
            return None
        tensor = op_inputs[0]
    return None


def _kernel_layer(graph: TfliteGraph, inputs: list[int], producers: dict[int, int]) -> str:
    kernel = producers.get(inputs[1], inputs[1])
    return owner(graph.tensor_name(kernel), "kernel")


def _transpose_stride(op: tflite.Operator) -> int:
    options = tflite.TransposeConvOptions()
    table = op.BuiltinOptions()
    options.Init(table.Bytes, table.Pos)
    return int(max(options.StrideH(), options.StrideW()))


def _check_all_placed(graph: TfliteGraph, placed: set[int]) -> None:
    for index in range(graph.graph.TensorsLength()):
        if index in placed:
            continue
        value = graph.constant(index)
        if value is not None and value.size > MAX_GRAPH_CONSTANT:
            name = graph.tensor_name(index)
            raise BackendLoadError(f"The model file {graph.path.name} has a weight this loader does not know: {name}.")
