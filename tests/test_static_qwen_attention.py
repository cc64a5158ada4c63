"""The decode step's attention over cached values, summed in chunks where that is faster on a GPU: the same
weighted sum as one matmul (runs without upstream's code: ``static_qwen`` needs only PyTorch)."""

from __future__ import annotations

import pytest
import torch

from voicelab.backends.cosyvoice.static_qwen import MIN_VALUE_PARTS, VALUE_CHUNK, _weighted_values


def _operands(slots: int, length: int, capacity: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax weights over ``length`` positions and values read as the step reads them: the first ``length``
    positions of a cache of ``capacity`` (a view, not contiguous), slots x kv heads (2) as the batch."""
    gen = torch.Generator().manual_seed(length + slots)
    probs = torch.randn(slots * 2, 7, length, generator=gen).softmax(dim=-1).to(dtype)
    cache = torch.randn(slots, 2, capacity, 64, generator=gen).to(dtype)
    return probs, cache[:, :, :length].reshape(slots * 2, length, 64)


@pytest.mark.parametrize(("slots", "length"), [(1, 512), (1, 2048), (16, 1024)])
def test_chunked_sums_equal_one_matmul_from_a_cache_view(slots: int, length: int) -> None:
    assert length // VALUE_CHUNK >= MIN_VALUE_PARTS  # these lengths take the chunked path
    probs, values = _operands(slots, length, 2048, torch.float32)
    expected = torch.bmm(probs, values.contiguous())
    torch.testing.assert_close(_weighted_values(probs, values), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("length", "dtype"), [(256, torch.float32), (1024, torch.bfloat16)])
def test_short_lengths_and_half_precision_take_the_one_matmul(length: int, dtype: torch.dtype) -> None:
    probs, values = _operands(2, length, 2048, dtype)
    assert torch.equal(_weighted_values(probs, values), torch.bmm(probs, values))
