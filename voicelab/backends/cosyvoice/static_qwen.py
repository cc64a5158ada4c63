"""Upstream's Qwen2 body run over a ``StaticKvCache``: the same weights (nothing is copied), our own attention so
that a decode step has fixed shapes and allocates nothing.

A prompt runs through transformers' own modules and is written into its slot's first positions (PyTorch's causal
SDPA). A decode step writes each slot's new key/value at that slot's position and attends over a length bucket
under a mask (positions at or before the slot's own), grouped-query heads sharing their key/value head in place.
The step is built from fewer, larger kernels than the modules launch, because one token's step is bound by kernel
count, not arithmetic (on the H200 a step took 3.0 ms replayed from a CUDA graph, ~40 kernels per layer, for
~0.4 ms of weight reads): the q/k/v and gate/up projections each as one matmul (their module weights become views
of one merged tensor, so no memory is added and the modules still run prefill), one rotary pass over queries and
keys together, the residual adds inside the output and down projections' matmuls, the mask and scaling inside the
score matmul, PyTorch's fused RMSNorm, and the weighted sum over cached values in partial sums where one matmul
would leave most of the device idle (``_weighted_values``). With ``kernels="triton"`` a step's layer runs as six or
seven Triton kernels instead (``fused_step``: the norms, bias, rotary, cache write, attention, residuals and SiLU
inside them); the prefill runs through transformers' modules either way (replayed from CUDA graphs by
``prefill_graphs``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from voicelab.backends.cosyvoice.kv_cache import StaticKvCache

# A decode step's attention over the cached values in partial sums (``_weighted_values``). On the H200 (float32,
# one row) the step took 1.97 / 2.07 / 2.21 ms at 512 / 1,024 / 2,048 positions against 2.15 / 2.64 / 3.61 as one
# matmul, 1.92 against 1.90 at 256, equal within 4e-6 in log-probability; in bfloat16 the one matmul stayed faster
# at every length (1.69 against 1.90 ms at 512) (2026-12-05).
VALUE_CHUNK = 64  # positions per partial sum (32 and 128 within 2 %)
MIN_VALUE_PARTS = 8  # from 512 positions
KERNELS = ("auto", "torch", "triton")  # auto: both prepared, each step names its side (``step_choice``)
# The prefill's attention kernels, in PyTorch's order of preference: cuDNN's is left out (see ``run_prompt``).
PREFILL_ATTENTION = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


class StaticQwen:
    """``body`` is a transformers ``Qwen2Model`` (upstream's ``Qwen2Encoder.model.model``)."""

    def __init__(self, body: Any, cache: StaticKvCache, kernels: str = "torch") -> None:
        if kernels not in KERNELS:
            raise ValueError(f"decode_kernels must be one of {', '.join(KERNELS)}, not {kernels!r}")
        self.kernels = kernels
        self.layers = list(body.layers)
        self.norm, self.rotary, self.cache = body.norm, body.rotary_emb, cache
        self.head_dim = cache.shape.head_dim
        self.scaling = self.head_dim**-0.5
        self.merged = [_MergedLayer.of(layer) for layer in self.layers]
        silu = all(_is_silu(layer.act) for layer in self.merged)
        if kernels == "triton" and not silu:
            raise ValueError("decode_kernels=triton fuses SiLU into the MLP; this model's activation is another")
        # the kernels a step may run, the default first; auto offers Triton's only where it computes this model
        self.sides = {"torch": ("torch",), "triton": ("triton",), "auto": ("torch", "triton") if silu else ("torch",)}[
            kernels
        ]
        # each layer's two RMSNorms as the fused kernels take them (weight, epsilon)
        self.folded_norms = (
            [(_folded(m.input_norm), _folded(m.post_norm)) for m in self.merged] if "triton" in self.sides else []
        )

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
        hidden = self.run_prompt(embeds, lambda index, key, value: self.cache.write_prefix(index, slot, key, value))
        return self.norm(hidden[:, -1])

    def run_prompt(
        self, embeds: torch.Tensor, write: Callable[[int, torch.Tensor, torch.Tensor], None]
    ) -> torch.Tensor:
        """The body over a (1, length, hidden) prompt, each layer's (kv_heads, length, head_dim) keys and values
        handed to ``write(layer, keys, values)``; (1, length, hidden) before the final norm. Causal: a position's
        output and keys depend on the positions up to it only, so a prompt padded at the end (``prefill_graphs``)
        leaves its own positions unchanged. Attention by flash or memory-efficient kernels where they apply, else
        PyTorch's math kernel, never cuDNN's (it plans anew for every prompt length)."""
        length = embeds.shape[1]
        positions = torch.arange(length, device=embeds.device).unsqueeze(0)
        cos, sin = self.rotary(embeds, positions)
        hidden = embeds
        with sdpa_kernel(PREFILL_ATTENTION):
            for index, layer in enumerate(self.layers):
                attn = layer.self_attn
                query, key, value = self._qkv(attn, layer.input_layernorm(hidden), cos, sin)
                write(index, key[0], value[0])
                out = F.scaled_dot_product_attention(
                    query, key, value, is_causal=True, scale=self.scaling, enable_gqa=True
                )
                hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(1, length, -1))
                hidden = self._mlp(layer, hidden)
        return hidden

    def step(self, embeds: torch.Tensor, positions: torch.Tensor, length: int, side: str | None = None) -> torch.Tensor:
        """One token for each of the cache's first ``slots`` slots: (slots, 1, hidden) inputs at (slots,)
        positions, attending over the first ``length`` cached positions; (slots, hidden) outputs after the
        final norm. No host sync, no allocation that depends on the data, so the call can be captured in a
        CUDA graph. ``side``: "torch" or "triton", one of ``sides`` (by default the first)."""
        slots = embeds.shape[0]
        shape = self.cache.shape
        cos, sin = self.rotary(embeds, positions.view(slots, 1))
        cos, sin = cos.view(slots, 1, self.head_dim), sin.view(slots, 1, self.head_dim)
        side = side or self.sides[0]
        if side not in self.sides:
            raise ValueError(f"this step was prepared for {' and '.join(self.sides)} kernels, not {side!r}")
        if side == "triton":
            return self._fused_step(embeds.view(slots, -1), positions, length, cos, sin)
        visible = torch.arange(length, device=embeds.device).view(1, length) <= positions.view(slots, 1)
        bias = torch.zeros(slots, length, dtype=embeds.dtype, device=embeds.device).masked_fill(~visible, -torch.inf)
        bias = bias.view(slots, 1, 1, length).expand(slots, shape.kv_heads, 1, length).reshape(-1, 1, length)
        hidden = embeds.view(slots, -1)
        heads = self.merged[0].heads if self.merged else 0
        for index, layer in enumerate(self.merged):
            qkv = F.linear(_rms_norm(hidden, layer.input_norm), layer.qkv_weight, layer.qkv_bias)
            qkv = qkv.view(slots, heads + 2 * shape.kv_heads, self.head_dim)
            rotated = _rotate(qkv[:, : heads + shape.kv_heads], cos, sin)  # queries and keys in one pass
            key = rotated[:, heads:].unsqueeze(2)  # (slots, kv_heads, 1, head_dim)
            self.cache.write_step(index, positions, key, qkv[:, heads + shape.kv_heads :].unsqueeze(2))
            out = self._grouped_attention(rotated[:, :heads], *self.cache.view(index, length, slots), bias)
            hidden = torch.addmm(hidden, out.view(slots, -1), layer.o_weight.t())
            gate, up = F.linear(_rms_norm(hidden, layer.post_norm), layer.gate_up_weight).chunk(2, dim=-1)
            hidden = torch.addmm(hidden, layer.act(gate) * up, layer.down_weight.t())
        return _rms_norm(hidden, self.norm)

    def _fused_step(
        self, hidden: torch.Tensor, positions: torch.Tensor, length: int, cos: torch.Tensor, sin: torch.Tensor
    ) -> torch.Tensor:
        """``step``'s layers through ``fused_step``'s Triton kernels: the same computation in float32 (summed in
        another order), fewer kernels."""
        from voicelab.backends.cosyvoice import fused_step as fused

        for index, (layer, (input_norm, post_norm)) in enumerate(zip(self.merged, self.folded_norms, strict=True)):
            keys, values = self.cache.keys[index], self.cache.values[index]
            qkv = fused.linear(hidden, layer.qkv_weight, norm=input_norm, bias=layer.qkv_bias)
            query = fused.rotary_write(qkv, cos, sin, positions, keys, values, layer.heads)
            out = fused.attention(query, keys, values, positions, length, self.scaling)
            hidden = fused.linear(out, layer.o_weight, residual=hidden)
            act = fused.linear(hidden, layer.gate_up_weight, norm=post_norm, glu=True)
            hidden = fused.linear(act, layer.down_weight, residual=hidden)
        return _rms_norm(hidden, self.norm)

    def _grouped_attention(
        self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor
    ) -> torch.Tensor:
        """One query per slot, (slots, heads, head_dim), over (slots, kv_heads, length, head_dim) keys and values
        without repeating them per head group (query head h reads key/value head h // group, as transformers'
        ``repeat_kv``); ``bias`` (slots x kv_heads, 1, length) is 0 where visible and -inf elsewhere; softmax in
        float32, as transformers' eager attention. (slots, heads, head_dim) out."""
        slots, heads = query.shape[:2]
        kv_heads, length = keys.shape[1], keys.shape[2]
        grouped = query.reshape(slots * kv_heads, heads // kv_heads, self.head_dim)
        keys = keys.reshape(slots * kv_heads, length, self.head_dim)
        scores = torch.baddbmm(bias, grouped, keys.transpose(-1, -2), alpha=self.scaling)
        probs = scores.float().softmax(dim=-1).to(values.dtype)
        out = _weighted_values(probs, values.reshape(slots * kv_heads, length, self.head_dim))
        return out.view(slots, heads, self.head_dim)


@dataclass(frozen=True)
class _MergedLayer:
    """One decoder layer's weights for the step: q/k/v and gate/up each merged into one tensor, the modules'
    own weights replaced by views of it (same values, same memory)."""

    qkv_weight: torch.Tensor
    qkv_bias: torch.Tensor | None
    o_weight: torch.Tensor
    gate_up_weight: torch.Tensor
    down_weight: torch.Tensor
    input_norm: Any
    post_norm: Any
    act: Any
    heads: int

    @classmethod
    def of(cls, layer: Any) -> _MergedLayer:
        attn, mlp = layer.self_attn, layer.mlp
        qkv = (attn.q_proj, attn.k_proj, attn.v_proj)
        biased = all(p.bias is not None for p in qkv)
        if any(p.bias is not None for p in (attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)) or (
            not biased and any(p.bias is not None for p in qkv)
        ):
            raise ValueError("this Qwen2 layer has projection biases the merged decode step does not apply")
        return cls(
            qkv_weight=_merge([p.weight for p in qkv]),
            qkv_bias=_merge([p.bias for p in qkv]) if biased else None,
            o_weight=attn.o_proj.weight,
            gate_up_weight=_merge([mlp.gate_proj.weight, mlp.up_proj.weight]),
            down_weight=mlp.down_proj.weight,
            input_norm=layer.input_layernorm,
            post_norm=layer.post_attention_layernorm,
            act=mlp.act_fn,
            heads=attn.q_proj.out_features // attn.head_dim,
        )


def _merge(parameters: list[torch.Tensor]) -> torch.Tensor:
    """The parameters concatenated along their first dimension; each parameter's data becomes a view of the result
    (an in-place load into a module still reaches the merged tensor, and no memory is held twice)."""
    merged = torch.cat([p.detach() for p in parameters], dim=0)
    start = 0
    for parameter in parameters:
        rows = parameter.shape[0]
        parameter.data = merged[start : start + rows]
        start += rows
    return merged


def _weighted_values(probs: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``probs`` (batch, group, length) times ``values`` (batch, length, head_dim). In float32 over 512 positions
    or more, the sum over positions is taken as partial sums of ``VALUE_CHUNK`` positions added after: as one
    matmul it ran on a few thread blocks that each walked every position. Elsewhere the one matmul was as fast or
    faster (bfloat16's kernels, short lengths)."""
    batch, group, length = probs.shape
    parts = length // VALUE_CHUNK
    if values.dtype != torch.float32 or parts < MIN_VALUE_PARTS or length % VALUE_CHUNK:
        return torch.bmm(probs, values)
    head_dim = values.shape[-1]
    chunked = probs.view(batch, group, parts, VALUE_CHUNK).transpose(1, 2).reshape(batch * parts, group, VALUE_CHUNK)
    partial = torch.bmm(chunked, values.reshape(batch * parts, VALUE_CHUNK, head_dim))
    return partial.view(batch, parts, group, head_dim).sum(dim=1)


def _is_silu(act: Any) -> bool:
    """Whether a layer's activation computes SiLU (transformers names its own class for it), asked of its values."""
    probe = torch.linspace(-6.0, 6.0, 25)
    return bool(torch.allclose(act(probe), F.silu(probe)))


def _folded(norm: Any) -> Any:
    """A Qwen2 RMSNorm's weight and epsilon for a fused kernel."""
    from voicelab.backends.cosyvoice.fused_step import Norm

    return Norm(norm.weight, float(norm.variance_epsilon))


def _rms_norm(hidden: torch.Tensor, norm: Any) -> torch.Tensor:
    """transformers' Qwen2 RMSNorm (``norm``'s weight and epsilon) as PyTorch's one fused call."""
    return F.rms_norm(hidden, (hidden.shape[-1],), norm.weight, norm.variance_epsilon)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding as transformers applies it (``rotate_half``)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos) + (rotated * sin)
