"""The parts of a random CosyVoice model directory that are not upstream modules: the Qwen2 body and its
tokenizer, and the two ONNX graphs upstream's frontend runs (CAM++ speaker embedding, speech tokenizer).

Shapes and names are what upstream reads: CAM++ takes (1, frames, 80) fbank and returns (1, 192); the speech
tokenizer takes (1, 128, frames) whisper log-mel plus (1,) int32 frame count and returns (1, frames / 4) token ids
below 6561 (25 tokens/s). The tokenizer is byte-level BPE with the Qwen2 layout that matters to upstream:
151643 ordinary ids, ``<|endoftext|>`` at 151643, so the special tokens upstream adds land where Qwen's do
(``<|endofprompt|>`` = 151646, which CosyVoice3's LLM checks for).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

QWEN_BASE_VOCAB = 151643
SPEECH_TOKENS = 6561
QWEN_05B: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "max_window_layers": 21,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "use_sliding_window": False,
    "tie_word_embeddings": True,
    "vocab_size": 151936,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "use_cache": True,
    "torch_dtype": "bfloat16",  # as the released CosyVoice-BlankEN: what dtype="auto" would pick
    "dtype": "bfloat16",
}


def write_tokenizer(folder: Path) -> None:
    """Byte-level BPE: every byte, plus merges of letter/space pairs (about 2 characters a token in English)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {symbol: index for index, symbol in enumerate(alphabet)}
    letters = [*"abcdefghijklmnopqrstuvwxyz", "Ġ"]
    merges = [(a, b) for a in letters for b in letters]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    while len(vocab) < QWEN_BASE_VOCAB:
        vocab[f"\u2400{len(vocab)}"] = len(vocab)  # fillers BPE can never produce
    vocab["<|endoftext|>"] = QWEN_BASE_VOCAB
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 32768,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))


def write_qwen(folder: Path, layers: int, device: str) -> None:
    """A Qwen2 causal LM of the 0.5B shape (``layers`` transformer blocks), random, saved as upstream loads it."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    config = Qwen2Config(**{**QWEN_05B, "num_hidden_layers": layers})
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    model.to(torch.bfloat16).save_pretrained(str(folder))
    write_tokenizer(folder)


def _save(graph: Any, path: Path) -> None:
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="voicelab")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def write_campplus(path: Path, seed: int) -> None:
    """(1, frames, 80) fbank → mean over frames → linear → (1, 192) embedding."""
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(seed).normal(0, 0.1, (80, 192)).astype(np.float32)
    nodes = [
        helper.make_node("ReduceMean", ["input"], ["pooled"], axes=[1], keepdims=0),
        helper.make_node("MatMul", ["pooled", "weight"], ["embedding"]),
    ]
    graph = helper.make_graph(
        nodes,
        "campplus_random",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", "frames", 80])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", 192])],
        [numpy_helper.from_array(weight, "weight")],
    )
    _save(graph, path)


def write_speech_tokenizer(path: Path, seed: int) -> None:
    """(1, 128, frames) log-mel + (1,) int32 → every 4th frame → linear → argmax → (1, frames / 4) ids."""
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(seed).normal(0, 1.0, (128, SPEECH_TOKENS)).astype(np.float32)
    constants = {
        "starts": np.array([0], np.int64),
        "ends": np.array([2**62], np.int64),
        "axes": np.array([1], np.int64),
        "steps": np.array([4], np.int64),
    }
    nodes = [
        helper.make_node("Transpose", ["feats"], ["frames"], perm=[0, 2, 1]),
        helper.make_node("Slice", ["frames", "starts", "ends", "axes", "steps"], ["strided"]),
        helper.make_node("MatMul", ["strided", "weight"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["indices"], axis=2, keepdims=0),
    ]
    initializers = [numpy_helper.from_array(weight, "weight")]
    initializers += [numpy_helper.from_array(value, name) for name, value in constants.items()]
    graph = helper.make_graph(
        nodes,
        "speech_tokenizer_random",
        [
            helper.make_tensor_value_info("feats", TensorProto.FLOAT, [1, 128, "frames"]),
            helper.make_tensor_value_info("feats_length", TensorProto.INT32, [1]),
        ],
        [helper.make_tensor_value_info("indices", TensorProto.INT64, [1, "tokens"])],
        initializers,
    )
    _save(graph, path)
