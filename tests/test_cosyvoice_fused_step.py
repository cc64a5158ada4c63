"""The decode step's Triton kernels (``decode_kernels=triton``) against the PyTorch step they replace.

Off a GPU the kernels run under Triton's interpreter (``TRITON_INTERPRET=1``, set here before Triton is imported).
Triton ships with PyTorch's CUDA builds, not with the CPU build of the default .venv, and the whole-step tests need
transformers: where either is missing these tests skip (CI); run them from the CosyVoice environment, e.g.
``.venv-cosy/bin/python -m pytest -q tests/test_cosyvoice_fused_step.py``, and on a GPU with ``-m gpu`` for bfloat16
(the interpreter cannot multiply bfloat16 blocks).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

import torch.nn.functional as F  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
HEADS, KV_HEADS, HEAD_DIM = 14, 2, 64  # Qwen2.5-0.5B's attention, the body of CosyVoice2's LLM


@pytest.fixture(scope="module")
def fused() -> ModuleType:
    from voicelab.backends.cosyvoice import fused_step

    return fused_step


def _random(*shape: int, seed: int, dtype: Any = None, scale: float = 1.0) -> Any:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=gen) * scale).to(DEVICE, dtype or torch.float32)


# bfloat16 blocks only on a GPU: the interpreter cannot multiply them (its numpy has no bfloat16)
DTYPES = [(torch.float32, 2e-5), (torch.float16, 4e-3)] + ([(torch.bfloat16, 3e-2)] if DEVICE == "cuda" else [])


@pytest.mark.parametrize("rows", [1, 3, 16])
@pytest.mark.parametrize(("dtype", "tolerance"), DTYPES)
def test_linear_folds_norm_bias_residual_and_silu_gate(
    fused: ModuleType, rows: int, dtype: Any, tolerance: float
) -> None:
    x = _random(rows, 200, seed=rows, dtype=dtype)
    weight = _random(96, 200, seed=2, dtype=dtype, scale=0.07)
    bias, residual = _random(96, seed=3, dtype=dtype), _random(rows, 96, seed=4, dtype=dtype)
    norm = fused.Norm(_random(200, seed=5, dtype=dtype, scale=0.2) + 1, 1e-6)
    normed = F.rms_norm(x.float(), (200,), norm.weight.float(), norm.eps).to(dtype).float()
    expected = residual.float() + normed @ weight.float().T + bias.float()
    got = fused.linear(x, weight, norm=norm, bias=bias, residual=residual)
    torch.testing.assert_close(got.float(), expected, atol=tolerance * 10, rtol=tolerance)
    gate, up = (normed @ weight.float().T).chunk(2, dim=-1)
    got = fused.linear(x, weight, norm=norm, glu=True)
    torch.testing.assert_close(got.float(), F.silu(gate) * up, atol=tolerance * 10, rtol=tolerance)
    with pytest.raises(AssertionError):  # the test sees a missing term: the residual is really added
        torch.testing.assert_close(fused.linear(x, weight, norm=norm, bias=bias).float(), expected)


def _cache(slots: int, capacity: int, seed: int) -> tuple[Any, Any]:
    return (
        _random(slots, KV_HEADS, capacity, HEAD_DIM, seed=seed),
        _random(slots, KV_HEADS, capacity, HEAD_DIM, seed=seed + 1),
    )


def _reference_attention(query: Any, keys: Any, values: Any, positions: Any, length: int) -> Any:
    """Grouped-query attention of each row over its slot's positions 0..its own, as transformers' eager one."""
    rows, group = query.shape[0], HEADS // KV_HEADS
    out = []
    for row in range(rows):
        visible = int(positions[row]) + 1
        k = keys[row, :, :visible].repeat_interleave(group, dim=0)  # (heads, visible, head_dim)
        v = values[row, :, :visible].repeat_interleave(group, dim=0)
        q = query[row].view(HEADS, 1, HEAD_DIM)
        probs = ((q @ k.transpose(-1, -2)) * HEAD_DIM**-0.5).softmax(dim=-1)
        out.append((probs @ v).reshape(-1))
    assert all(int(p) < length for p in positions)
    return torch.stack(out)


@pytest.mark.parametrize(("rows", "length"), [(1, 128), (1, 512), (5, 256), (16, 512)])
def test_attention_in_splits_sees_each_rows_positions_and_no_further(fused: ModuleType, rows: int, length: int) -> None:
    keys, values = _cache(16, 640, seed=length)
    query = _random(rows, HEADS * HEAD_DIM, seed=rows)
    # the last row at the bucket's end, the first at its start (one visible position), the rest in between
    positions = torch.linspace(0, length - 1, rows).long().to(DEVICE) if rows > 1 else torch.tensor([length - 1])
    positions = positions.to(DEVICE)
    got = fused.attention(query, keys, values, positions, length, HEAD_DIM**-0.5)
    expected = _reference_attention(query, keys, values, positions, length)
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=2e-5)
    keys[:rows, :, length - 1 :] = 1e4  # positions past any row's own (and past the bucket) change nothing
    values[:rows, :, length - 1 :] = float("nan")
    masked = fused.attention(query, keys, values, torch.clamp(positions, max=length - 2), length, HEAD_DIM**-0.5)
    assert torch.isfinite(masked).all()


def test_rotary_write_rotates_queries_and_keys_and_stores_keys_and_values_at_each_position(fused: ModuleType) -> None:
    from voicelab.backends.cosyvoice.static_qwen import _rotate

    rows = 3
    qkv = _random(rows, (HEADS + 2 * KV_HEADS) * HEAD_DIM, seed=1)
    angles = _random(rows, 1, HEAD_DIM // 2, seed=2).repeat(1, 1, 2)
    cos, sin = angles.cos(), angles.sin()
    positions = torch.tensor([5, 0, 9], device=DEVICE)
    keys, values = _cache(4, 16, seed=3)
    before_keys, before_values = keys.clone(), values.clone()
    query = fused.rotary_write(qkv, cos, sin, positions, keys, values, HEADS)
    heads = qkv.view(rows, HEADS + 2 * KV_HEADS, HEAD_DIM)
    rotated = _rotate(heads[:, : HEADS + KV_HEADS], cos, sin)
    torch.testing.assert_close(query, rotated[:, :HEADS].reshape(rows, -1), atol=1e-6, rtol=1e-6)
    for row, position in enumerate(positions.tolist()):
        torch.testing.assert_close(keys[row, :, position], rotated[row, HEADS:], atol=1e-6, rtol=1e-6)
        assert torch.equal(values[row, :, position], heads[row, HEADS + KV_HEADS :])
        before_keys[row, :, position], before_values[row, :, position] = (
            keys[row, :, position],
            values[row, :, position],
        )
    assert torch.equal(keys, before_keys) and torch.equal(values, before_values)  # nothing else was written


@pytest.fixture(scope="module")
def body() -> Any:
    transformers = pytest.importorskip("transformers")
    from voicelab.backends.cosyvoice.random_parts import QWEN_05B

    # the 0.5B body's layer with fewer heads (six query heads to each of two key/value heads: a group that is not
    # a power of two, as its seven) and a narrower MLP, so that Triton's interpreter gets through it on a CPU
    small = {"num_hidden_layers": 2, "num_attention_heads": 6, "hidden_size": 384, "intermediate_size": 512}
    config = transformers.Qwen2Config(**{**QWEN_05B, **small})
    torch.manual_seed(0)
    return transformers.Qwen2Model(config).to(DEVICE).eval()


def _steps(body: Any, kernels: str, rows: int, length: int) -> list[Any]:
    from voicelab.backends.cosyvoice.kv_cache import QwenShape, StaticKvCache
    from voicelab.backends.cosyvoice.static_qwen import StaticQwen

    cache = StaticKvCache(QwenShape.of(body.config), 16, 512, torch.float32, torch.device(DEVICE))
    gen = torch.Generator().manual_seed(1)
    cache.keys.copy_(torch.randn(cache.keys.shape, generator=gen))
    cache.values.copy_(torch.randn(cache.values.shape, generator=gen))
    qwen = StaticQwen(body, cache, kernels)
    positions = torch.linspace(length // 2, length - 3, rows).long().to(DEVICE)
    outs = []
    for step in range(2):  # the second step reads the keys and values the previous one wrote
        embeds = _random(rows, 1, body.config.hidden_size, seed=10 + step)
        outs.append(qwen.step(embeds, positions + step, length))
    return outs


@pytest.mark.parametrize(("rows", "length"), [(1, 512), (4, 256)])
@torch.inference_mode()
def test_the_fused_step_equals_the_pytorch_step(body: Any, rows: int, length: int) -> None:
    for got, expected in zip(_steps(body, "triton", rows, length), _steps(body, "torch", rows, length), strict=True):
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_an_unknown_kernel_choice_is_one_sentence(body: Any) -> None:
    from voicelab.backends.cosyvoice.kv_cache import QwenShape, StaticKvCache
    from voicelab.backends.cosyvoice.static_qwen import StaticQwen

    cache = StaticKvCache(QwenShape.of(body.config), 1, 128, torch.float32, torch.device(DEVICE))
    with pytest.raises(ValueError, match="decode_kernels must be one of auto, torch, triton, not 'cuda'"):
        StaticQwen(body, cache, "cuda")


class _Llm(torch.nn.Module):
    """What ``StepRunner`` reads of upstream's LLM: the Qwen body, the speech embedding and the decoder head."""

    def __init__(self, body: Any, vocabulary: int = 300) -> None:
        super().__init__()
        hidden = body.config.hidden_size
        self.llm = torch.nn.Module()
        self.llm.model = torch.nn.Module()
        self.llm.model.model = body
        torch.manual_seed(3)
        self.speech_embedding = torch.nn.Embedding(vocabulary, hidden).to(DEVICE)
        self.llm_decoder = torch.nn.Linear(hidden, vocabulary).to(DEVICE)


def _auto_runner(body: Any) -> Any:
    from voicelab.backends.cosyvoice.kv_cache import QwenShape, StaticKvCache
    from voicelab.backends.cosyvoice.step_graphs import StepRunner

    cache = StaticKvCache(QwenShape.of(body.config), 4, 512, torch.float32, torch.device(DEVICE))
    return StepRunner(_Llm(body), cache, graphs=False, shrink_rows=True, kernels="auto")


@pytest.mark.parametrize("shape", [(1, 512), (4, 256)])
@torch.inference_mode()
def test_auto_compares_both_sides_on_a_random_cache_and_keeps_the_faster_only_where_they_agree(
    body: Any, shape: tuple[int, int]
) -> None:
    """``decode_kernels=auto``'s trial (``step_choice``), here on eager steps: both sides run the same step of
    every row at its own late position over random keys and values; Triton's log-probabilities agree with
    PyTorch's, the faster side wins, and a side that computes another step never does, however fast."""
    from voicelab.backends.cosyvoice import step_choice

    runner = _auto_runner(body)
    assert runner.qwen.sides == ("torch", "triton")
    step_choice.trial_inputs(runner.cache, runner.tokens, runner.positions, 300)
    assert runner.cache.keys.abs().sum() > 0 and runner.tokens.abs().sum() > 0
    steps = {side: (lambda side=side: runner._eager(*shape, side)) for side in step_choice.SIDES}
    speeds = iter((2.0, 1.0))  # the timer's answers, torch's first
    trial = step_choice.compare(steps, runner.logp, runner.positions, shape, lambda step: next(speeds))
    rows, length = shape
    assert runner.positions[:rows].tolist() == [length - 1 - row for row in range(rows)]
    assert 0 < trial.difference < 1e-4 and trial.ms == {"torch": 2.0, "triton": 1.0} and trial.winner == "triton"

    def another_step() -> None:  # fast, but not the same step: a near-tie's worth off
        runner._eager(*shape, "triton")
        runner.logp[:rows] += 0.01

    wrong = step_choice.compare({**steps, "triton": another_step}, runner.logp, runner.positions, shape, lambda s: 1.0)
    assert wrong.difference == pytest.approx(0.01, abs=1e-4) and wrong.winner == "torch"
    step_choice.clear(runner.cache, runner.tokens, runner.positions)
    assert not runner.cache.keys.any() and not runner.positions.any()


def test_auto_keeps_the_faster_side_only_when_the_same() -> None:
    from voicelab.backends.cosyvoice.step_choice import SideTrial

    assert SideTrial({"torch": 2.0, "triton": 1.0}, 1e-6, 1e-3).winner == "triton"
    assert SideTrial({"torch": 1.0, "triton": 2.0}, 1e-6, 1e-3).winner == "torch"
    assert SideTrial({"torch": 2.0, "triton": 1.0}, 2e-3, 1e-3).winner == "torch"
    assert SideTrial({"torch": 2.0, "triton": 1.0}, float("nan"), 1e-3).winner == "torch"


def test_auto_offers_pytorchs_kernels_alone_for_another_activation(body: Any) -> None:
    import copy

    other = copy.deepcopy(body)
    for layer in other.layers:
        layer.mlp.act_fn = torch.nn.GELU()
    runner = _auto_runner(other)
    assert runner.qwen.sides == ("torch",) and not runner.qwen.folded_norms
    with pytest.raises(ValueError, match="prepared for torch kernels, not 'triton'"):
        runner._eager(1, 256, "triton")
