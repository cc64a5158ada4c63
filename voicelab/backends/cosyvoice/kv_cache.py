"""A static key/value cache for the speech-token LLM: allocated once, read through length buckets.

Upstream's decode grows a ``DynamicCache`` by concatenation every token (a new allocation per layer per token,
and shapes a CUDA graph cannot replay). Here every slot (one request each) owns ``capacity`` positions from the
start; a decode step attends over the first ``bucket`` positions, the smallest bucket that holds every active
slot's next position, so one captured graph serves every step whose length falls in its bucket.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

MIN_BUCKET = 128


@dataclass(frozen=True)
class QwenShape:
    """The sizes of a Qwen2 body that the cache and the static forward need."""

    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int

    @classmethod
    def of(cls, config: Any) -> QwenShape:
        """From a transformers ``Qwen2Config``."""
        heads = int(config.num_attention_heads)
        hidden = int(config.hidden_size)
        head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
        return cls(int(config.num_hidden_layers), heads, int(config.num_key_value_heads), head_dim, hidden)


def length_buckets(capacity: int, smallest: int = MIN_BUCKET) -> tuple[int, ...]:
    """Powers of two from ``smallest`` up, the last one exactly ``capacity``."""
    buckets: list[int] = []
    size = smallest
    while size < capacity:
        buckets.append(size)
        size *= 2
    buckets.append(capacity)
    return tuple(buckets)


class StaticKvCache:
    """Keys and values of shape (layers, slots, kv_heads, capacity, head_dim), on one device, one dtype."""

    def __init__(self, shape: QwenShape, slots: int, capacity: int, dtype: torch.dtype, device: torch.device) -> None:
        if slots < 1 or capacity < 1:
            raise ValueError(f"a KV cache needs at least one slot and one position, not {slots} x {capacity}")
        self.shape, self.slots, self.capacity = shape, slots, capacity
        size = (shape.layers, slots, shape.kv_heads, capacity, shape.head_dim)
        self.keys = torch.zeros(size, dtype=dtype, device=device)
        self.values = torch.zeros(size, dtype=dtype, device=device)
        self.buckets = length_buckets(capacity)

    @property
    def nbytes(self) -> int:
        return 2 * self.keys.numel() * self.keys.element_size()

    def bucket(self, length: int) -> int:
        """The smallest bucket holding ``length`` positions; ``ValueError`` past the capacity."""
        return fit(self.buckets, length, "positions")

    def row_buckets(self, shrink: bool) -> tuple[int, ...]:
        """How many slots a step may run: always all of them, or (``shrink``) the first 1, 2, 4, ... slots."""
        return length_buckets(self.slots, smallest=1) if shrink else (self.slots,)

    def write_prefix(self, layer: int, slot: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Store a prompt's (kv_heads, length, head_dim) keys and values at positions 0..length-1 of ``slot``."""
        length = keys.shape[-2]
        self.keys[layer, slot, :, :length] = keys
        self.values[layer, slot, :, :length] = values

    def write_step(self, layer: int, positions: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Store one new (rows, kv_heads, 1, head_dim) key/value for each of the first ``rows`` slots at that
        slot's position (no sync)."""
        rows = positions.shape[0]
        index = positions.view(-1, 1, 1, 1).expand(-1, self.shape.kv_heads, 1, self.shape.head_dim)
        self.keys[layer, :rows].scatter_(2, index, keys)
        self.values[layer, :rows].scatter_(2, index, values)

    def view(self, layer: int, length: int, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first ``rows`` slots' first ``length`` positions of one layer (views, no copy)."""
        return self.keys[layer, :rows, :, :length], self.values[layer, :rows, :, :length]

    def prefix(self, layer: int, slot: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One slot's first ``length`` positions of one layer, shaped (1, kv_heads, length, head_dim)."""
        return self.keys[layer, slot : slot + 1, :, :length], self.values[layer, slot : slot + 1, :, :length]


def fit(buckets: tuple[int, ...], size: int, what: str) -> int:
    """The smallest of ``buckets`` that holds ``size``; ``ValueError`` past the largest."""
    for bucket in buckets:
        if size <= bucket:
            return bucket
    raise ValueError(f"{size} {what} do not fit a KV cache of {buckets[-1]}")


def decode_room(prompt_positions: int, min_len: int, max_len: int, capacity: int) -> int | None:
    """How many tokens a request may decode in a cache of ``capacity`` positions: upstream's ``max_len`` (20 per
    text token, a ceiling a real model stops far below), cut to what the cache holds; ``None`` when not even
    ``min_len`` fits (the request then runs upstream's own loop). Cutting instead of falling back matters: a
    200-character text asks for ~4,000 tokens, and upstream's loop runs at a sixth of the speed (H200, 2026-12-01).
    """
    room = capacity - prompt_positions
    return min(max_len, room) if room >= max(min_len, 1) else None
