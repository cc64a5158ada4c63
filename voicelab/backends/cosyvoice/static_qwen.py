"""Upstream's Qwen2 body run over a ``StaticKvCache``: the same modules and weights (nothing is copied), our own
attention so that a decode step has fixed shapes and allocates nothing.

The norms, projections, rotary embedding and MLP are transformers' own modules, called as they are; only the
attention differs from transformers' path: a prompt is written into its slot's first positions (PyTorch's causal
SDPA), and a decode step writes each slot's new key/value at that slot's position and attends over a length bucket
under a mask (positions at or before the slot's own), grouped-query heads sharing their key/value head in place.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from voicelab.backends.cosyvoice.kv_cache import StaticKvCache


class StaticQwen:
    """``body`` is a transformers ``Qwen2Model`` (upstream's ``Qwen2Encoder.model.model``)."""

    def __init__(self, body: Any, cache: StaticKvCache) -> None:
        self.layers = list(body.layers)
        self.norm, self.rotary, self.cache = body.norm, body.rotary_emb, cache
        self.head_dim = cache.shape.head_dim
        self.scaling = self.head_dim**-0.5

    def _qkv(
        self, attn: Any, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(batch, heads, length, head_dim) queries and (batch, kv_heads, length, head_dim) keys and values."""
        batch, length = hidden.shape[:2]
        shape = (batch, length, -1, self.head_dim)
        query = attn.q_proj(hidden).view(shape).transpose(1, 2)
        key = attn.k_proj(hidden).view(shape).transpose(1, 2)
        value = attn.v_proj(hidden).view(shape).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return _rotate(query, cos, sin), _rotate(key, cos, sin), value

    def _mlp(self, layer: Any, hidden: torch.Tensor) -> torch.Tensor:
        return hidden + layer.mlp(layer.post_attention_layernorm(hidden))

    def prefill(self, embeds: torch.Tensor, slot: int) -> torch.Tensor:
        """Run a (1, length, hidden) prompt into ``slot``'s positions 0..length-1; the last position's output
        after the final norm, (1, hidden)."""
        length = embeds.shape[1]
        positions = torch.arange(length, device=embeds.device).unsqueeze(0)
        cos, sin = self.rotary(embeds, positions)
        hidden = embeds
        for index, layer in enumerate(self.layers):
            attn = layer.self_attn
            query, key, value = self._qkv(attn, layer.input_layernorm(hidden), cos, sin)
            self.cache.write_prefix(index, slot, key[0], value[0])
            out = F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=self.scaling, enable_gqa=True)
            hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(1, length, -1))
            hidden = self._mlp(layer, hidden)
        return self.norm(hidden[:, -1])

    def step(self, embeds: torch.Tensor, positions: torch.Tensor, length: int) -> torch.Tensor:
        """One token for each of the cache's first ``slots`` slots: (slots, 1, hidden) inputs at (slots,)
        positions, attending over the first ``length`` cached positions; (slots, hidden) outputs after the
        final norm. No host sync, no allocation that depends on the data, so the call can be captured in a
        CUDA graph."""
        slots = embeds.shape[0]
        cos, sin = self.rotary(embeds, positions.view(slots, 1))
        visible = torch.arange(length, device=embeds.device).view(1, 1, 1, length) <= positions.view(slots, 1, 1, 1)
        hidden = embeds
        for index, layer in enumerate(self.layers):
            attn = layer.self_attn
            query, key, value = self._qkv(attn, layer.input_layernorm(hidden), cos, sin)
            self.cache.write_step(index, positions, key, value)
            out = self._grouped_attention(query, *self.cache.view(index, length, slots), visible)
            hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(slots, 1, -1))
            hidden = self._mlp(layer, hidden)
        return self.norm(hidden[:, -1])

    def _grouped_attention(
        self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, visible: torch.Tensor
    ) -> torch.Tensor:
        """One query per slot, (slots, heads, 1, head_dim), over (slots, kv_heads, length, head_dim) keys and
        values without repeating them per head group (query head h reads key/value head h // group, as
        transformers' ``repeat_kv``); softmax in float32, as transformers' eager attention."""
        slots, heads = query.shape[:2]
        kv_heads = keys.shape[1]
        grouped = query.view(slots, kv_heads, heads // kv_heads, self.head_dim)
        scores = torch.matmul(grouped, keys.transpose(-1, -2)) * self.scaling  # (slots, kv, group, length)
        scores = scores.masked_fill(~visible.view(slots, 1, 1, -1), float("-inf"))
        probs = scores.float().softmax(dim=-1).to(values.dtype)
        return torch.matmul(probs, values).view(slots, heads, 1, self.head_dim)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding as transformers applies it (``rotate_half``)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos) + (rotated * sin)
