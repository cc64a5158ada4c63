"""``decode_kernels=auto``: which kernels each decode-step shape replays, chosen when the model loads.

PyTorch's kernels and ours (``fused_step``, Triton) trade places by shape and card: one row is a stream of weight
reads, where fewer and fused kernels win; sixteen rows are small matrix products, where cuBLAS may. So each
(rows, length) shape is captured with both, both graphs replay the same step on one cache filled with random
keys and values (every row at a different late position, so the attention's splits are all used), and the faster
is kept where their log-probabilities agree within the dtype's tolerance; otherwise PyTorch's, the reference.
The panel lists both graphs of each shape, the one kept marked as such.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

SIDES = ("torch", "triton")
STAGES = {"torch": "llm step", "triton": "llm step (triton)"}  # the panel's name for each side's graphs
# The largest |log-probability| difference of a Triton step from PyTorch's that still counts as the same step: the
# sums run in another order (float32: ~1e-6 on the CPU's interpreter; each half-precision kernel rounds its output).
TOLERANCE = {torch.float32: 1e-3, torch.bfloat16: 0.1, torch.float16: 0.05}
TRIAL_REPLAYS = 10  # per side and shape: a step is 1-5 ms, so the median of ten settles a choice in ~1 s a load


def timed(step: Callable[[], object]) -> float:
    """Median device ms of ``TRIAL_REPLAYS`` replays."""
    from voicelab.backends.cuda_graphs import device_ms

    return device_ms(step, runs=TRIAL_REPLAYS)


@dataclass(frozen=True)
class SideTrial:
    """One shape's two replays on the same inputs: device ms of each side and how far Triton's log-probabilities
    are from PyTorch's."""

    ms: dict[str, float]
    difference: float
    tolerance: float

    @property
    def winner(self) -> str:
        """Triton where it is the same step and faster; PyTorch's kernels otherwise."""
        same = self.difference <= self.tolerance  # False for NaN too
        return "triton" if same and self.ms["triton"] < self.ms["torch"] else "torch"


def trial_inputs(cache: Any, tokens: torch.Tensor, positions: torch.Tensor, vocabulary: int) -> None:
    """Random keys, values and last tokens, fixed by a seed of their own (the default generators are untouched)."""
    generator = torch.Generator(device=cache.keys.device).manual_seed(0)
    for tensor in (cache.keys, cache.values):
        tensor.normal_(generator=generator)
    tokens.copy_(torch.randint(vocabulary, tokens.shape, generator=generator, device=tokens.device))
    positions.zero_()


def compare(
    steps: Mapping[str, Callable[[], object]],
    logp: torch.Tensor,
    positions: torch.Tensor,
    shape: tuple[int, int],
    timer: Callable[[Callable[[], object]], float],
) -> SideTrial:
    """Run each side's step of ``shape`` (rows, length) once on rows at positions length - 1, length - 2, ... and
    read its log-probabilities from ``logp``; then time each with ``timer``. The cache is as ``trial_inputs`` left
    it (each side rewrites the same positions with what it computes there)."""
    rows, length = shape
    positions[:rows].copy_((length - 1 - torch.arange(rows, device=positions.device)).clamp(min=0))
    outputs = {}
    for side, step in steps.items():
        step()
        outputs[side] = logp[:rows].float().clone()
    difference = (outputs["triton"] - outputs["torch"]).abs().max().item()
    ms = {side: timer(step) for side, step in steps.items()}
    return SideTrial(ms, difference, TOLERANCE.get(logp.dtype, TOLERANCE[torch.float32]))


def clear(cache: Any, tokens: torch.Tensor, positions: torch.Tensor) -> None:
    """The state a capture leaves: zeros (any request's prefill overwrites what it reads)."""
    for tensor in (cache.keys, cache.values, tokens, positions):
        tensor.zero_()
