"""The decode step's layer as Triton kernels (backend option ``decode_kernels=triton``): six or seven launches a
layer instead of the ~22 PyTorch kernels of ``StaticQwen.step``.

On the H200 a float32 step at one row and 512 positions spent 1.91 ms in 522 kernels: the projections' matrix-vector
products ~0.7 ms (~2 TB/s of weight reads, under half the card's bandwidth), the attention ~0.6 ms (before its
partial sums), and ~0.6 ms in ~300 small kernels of 1-4 us each (norms, rotary, cache writes, copies, residual adds).
Here each layer is:

- ``linear`` with the RMSNorm folded in (each program normalises the rows itself: they are one token's 896 values)
  and the bias added: queries, keys and values;
- ``rotary_write``: the rotary embedding of queries and keys, the key and value written at each row's position;
- ``attention``: scores, mask, softmax and the weighted sum over the cached values in one pass per (row, key/value
  head, split of the positions), the splits combined by ``combine`` (flash-decoding's order);
- ``linear`` with the residual added: the output projection;
- ``linear`` with the norm folded in and SiLU(gate) x up taken in the same program: the MLP's first half;
- ``linear`` with the residual added: the down projection.

A linear kernel reads each weight once for every row (up to 16: the decode slots). One row takes the vector form
(products summed along K in float32); up to 16 float32 rows the same products broadcast over the rows (IEEE float32
on the CUDA cores: not TF32, so the step's numbers stay float32's; ``tl.dot`` in IEEE float32 took 6.1-6.8 ms a step
on an H100); half-precision rows take ``tl.dot`` over 16 padded rows on the tensor cores, accumulating in
float32. Kernels are chosen by shape only, so a step captures in a CUDA graph as before.
"""

from __future__ import annotations

import triton
import triton.language as tl

TARGET_PROGRAMS = 264  # about two programs per streaming multiprocessor (132 on an H100/H200)


VECTOR, BROADCAST, DOT = 0, 1, 2  # how ``_linear`` multiplies (``FORM``): one row, a few float32 rows, tl.dot


@triton.jit
def _product(x, w, FORM: tl.constexpr, IEEE: tl.constexpr):
    """(rows, K) x (N, K) -> (rows, N) in float32: one row as products summed along K; a few rows the same way,
    broadcast over the rows (the weight tile read once, no padding to 16 rows, CUDA cores); or ``tl.dot``."""
    if FORM == 0:
        result = tl.sum(x.to(tl.float32) * w.to(tl.float32), axis=1)[None, :]
    elif FORM == 1:
        result = tl.sum(x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :], axis=2)
    elif IEEE:
        result = tl.dot(x, tl.trans(w), input_precision="ieee")
    else:
        result = tl.dot(x, tl.trans(w))
    return result


@triton.jit
def _linear(
    x_ptr, w_ptr, out_ptr, bias_ptr, residual_ptr, norm_ptr,
    rows, n, up_offset, eps,
    stride_x, stride_w, stride_out, stride_residual,
    K: tl.constexpr, NORM: tl.constexpr, BIAS: tl.constexpr, RESIDUAL: tl.constexpr, GLU: tl.constexpr,
    IEEE: tl.constexpr, FORM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    """out[m, j] = residual[m, j] + bias[j] + sum_k norm(x)[m, k] w[j, k]; with GLU, silu(that) * the same
    product with weight row j + up_offset (no bias or residual)."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ids = tl.arange(0, BLOCK_M)
    row_ok, col_ok = row_ids < rows, cols < n
    if NORM:
        squares = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for start in range(0, K, BLOCK_K):
            ks = start + tl.arange(0, BLOCK_K)
            x = tl.load(x_ptr + row_ids[:, None] * stride_x + ks[None, :], row_ok[:, None] & (ks < K)[None, :], 0.0)
            x = x.to(tl.float32)
            squares += tl.sum(x * x, axis=1)
        inverse_rms = 1.0 / tl.sqrt(squares / K + eps)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        ks = start + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        x = tl.load(x_ptr + row_ids[:, None] * stride_x + ks[None, :], row_ok[:, None] & k_ok[None, :], 0.0)
        if NORM:
            scale = tl.load(norm_ptr + ks, k_ok, 0.0).to(tl.float32)
            x = x.to(tl.float32) * inverse_rms[:, None] * scale[None, :]
        x = x.to(w_ptr.dtype.element_ty)
        w_mask = col_ok[:, None] & k_ok[None, :]
        w = tl.load(w_ptr + cols[:, None] * stride_w + ks[None, :], w_mask, 0.0)
        acc += _product(x, w, FORM, IEEE)
        if GLU:
            w_up = tl.load(w_ptr + (cols + up_offset)[:, None] * stride_w + ks[None, :], w_mask, 0.0)
            up += _product(x, w_up, FORM, IEEE)
    if BIAS:
        acc += tl.load(bias_ptr + cols, col_ok, 0.0).to(tl.float32)[None, :]
    if GLU:
        acc = acc / (1.0 + tl.exp(-acc)) * up
    out_mask = row_ok[:, None] & col_ok[None, :]
    if RESIDUAL:
        residual = tl.load(residual_ptr + row_ids[:, None] * stride_residual + cols[None, :], out_mask, 0.0)
        acc += residual.to(tl.float32)
    tl.store(out_ptr + row_ids[:, None] * stride_out + cols[None, :], acc.to(out_ptr.dtype.element_ty), out_mask)


@triton.jit
def _rotary_write(
    qkv_ptr, cos_ptr, sin_ptr, positions_ptr, query_ptr, keys_ptr, values_ptr,
    stride_qkv, stride_angle, stride_query, stride_slot, stride_head, stride_position,
    HEADS: tl.constexpr, KV_HEADS: tl.constexpr, HALF: tl.constexpr,
):  # fmt: skip
    """Program (row, head): transformers' ``rotate_half`` rotary on a query or key head; a key goes into the cache
    at the row's position with its value, a query into ``query``."""
    row, head = tl.program_id(0), tl.program_id(1)
    lanes = tl.arange(0, HALF)
    source = qkv_ptr + row * stride_qkv + head * 2 * HALF
    first = tl.load(source + lanes).to(tl.float32)
    second = tl.load(source + HALF + lanes).to(tl.float32)
    angle = row * stride_angle + lanes
    cos_first, cos_second = tl.load(cos_ptr + angle).to(tl.float32), tl.load(cos_ptr + angle + HALF).to(tl.float32)
    sin_first, sin_second = tl.load(sin_ptr + angle).to(tl.float32), tl.load(sin_ptr + angle + HALF).to(tl.float32)
    rotated_first = first * cos_first - second * sin_first
    rotated_second = second * cos_second + first * sin_second
    if head < HEADS:
        target = query_ptr + row * stride_query + head * 2 * HALF
        tl.store(target + lanes, rotated_first.to(query_ptr.dtype.element_ty))
        tl.store(target + HALF + lanes, rotated_second.to(query_ptr.dtype.element_ty))
    else:
        kv_head = head - HEADS
        position = tl.load(positions_ptr + row)
        offset = row * stride_slot + kv_head * stride_head + position * stride_position
        tl.store(keys_ptr + offset + lanes, rotated_first.to(keys_ptr.dtype.element_ty))
        tl.store(keys_ptr + offset + HALF + lanes, rotated_second.to(keys_ptr.dtype.element_ty))
        value = qkv_ptr + row * stride_qkv + (HEADS + KV_HEADS + kv_head) * 2 * HALF
        tl.store(values_ptr + offset + lanes, tl.load(value + lanes))
        tl.store(values_ptr + offset + HALF + lanes, tl.load(value + HALF + lanes))


@triton.jit
def _attention(
    query_ptr, keys_ptr, values_ptr, positions_ptr, out_ptr, best_ptr, total_ptr, partial_ptr,
    length, scale, stride_query, stride_slot, stride_head, stride_position,
    KV_HEADS: tl.constexpr, GROUP: tl.constexpr, BLOCK_G: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_P: tl.constexpr, SPLIT: tl.constexpr, SPLITS: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """Program (row x key/value head, split): the group's queries against positions [split x SPLIT, +SPLIT) that
    are at or before the row's own. One split writes the output; several write running max, sum and weighted
    values for ``_combine``."""
    pair, split = tl.program_id(0), tl.program_id(1)
    row, kv_head = pair // KV_HEADS, pair % KV_HEADS
    group, dims = tl.arange(0, BLOCK_G), tl.arange(0, HEAD_DIM)
    group_ok = group < GROUP
    heads = kv_head * GROUP + group
    query = tl.load(query_ptr + row * stride_query + heads[:, None] * HEAD_DIM + dims[None, :], group_ok[:, None], 0.0)
    position = tl.load(positions_ptr + row)
    cache = row * stride_slot + kv_head * stride_head
    best = tl.full((BLOCK_G,), float("-inf"), dtype=tl.float32)
    total = tl.zeros((BLOCK_G,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_G, HEAD_DIM), dtype=tl.float32)
    for offset in range(0, SPLIT, BLOCK_P):
        places = split * SPLIT + offset + tl.arange(0, BLOCK_P)
        visible = (places <= position) & (places < length)
        at = cache + places[:, None] * stride_position + dims[None, :]
        keys = tl.load(keys_ptr + at, visible[:, None], 0.0)
        if IEEE:
            scores = tl.dot(query, tl.trans(keys), input_precision="ieee") * scale
        else:
            scores = tl.dot(query, tl.trans(keys)) * scale
        scores = tl.where(visible[None, :], scores, float("-inf"))
        new_best = tl.maximum(best, tl.max(scores, axis=1))
        safe = tl.where(new_best == float("-inf"), 0.0, new_best)  # nothing visible yet: weights stay 0
        weights = tl.exp(scores - safe[:, None])
        kept = tl.exp(best - safe)
        values = tl.load(values_ptr + at, visible[:, None], 0.0)
        if IEEE:
            weighted = tl.dot(weights, values, input_precision="ieee")
        else:
            weighted = tl.dot(weights.to(values_ptr.dtype.element_ty), values)
        acc = acc * kept[:, None] + weighted
        total = total * kept + tl.sum(weights, axis=1)
        best = new_best
    if SPLITS == 1:
        out = acc / total[:, None]
        target = out_ptr + row * stride_query + heads[:, None] * HEAD_DIM + dims[None, :]
        tl.store(target, out.to(out_ptr.dtype.element_ty), group_ok[:, None])
    else:
        slot = pair * SPLITS + split
        tl.store(best_ptr + slot * BLOCK_G + group, best)
        tl.store(total_ptr + slot * BLOCK_G + group, total)
        tl.store(partial_ptr + (slot * BLOCK_G + group[:, None]) * HEAD_DIM + dims[None, :], acc)


@triton.jit
def _combine(
    best_ptr, total_ptr, partial_ptr, out_ptr, stride_out,
    KV_HEADS: tl.constexpr, GROUP: tl.constexpr, BLOCK_G: tl.constexpr, HEAD_DIM: tl.constexpr,
    SPLITS: tl.constexpr,
):  # fmt: skip
    """Program (row x key/value head): the splits' partial softmax sums as one (split 0 always sees position 0)."""
    pair = tl.program_id(0)
    row, kv_head = pair // KV_HEADS, pair % KV_HEADS
    group, dims = tl.arange(0, BLOCK_G), tl.arange(0, HEAD_DIM)
    best = tl.full((BLOCK_G,), float("-inf"), dtype=tl.float32)
    for split in range(SPLITS):
        best = tl.maximum(best, tl.load(best_ptr + (pair * SPLITS + split) * BLOCK_G + group))
    total = tl.zeros((BLOCK_G,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_G, HEAD_DIM), dtype=tl.float32)
    for split in range(SPLITS):
        slot = pair * SPLITS + split
        weight = tl.exp(tl.load(best_ptr + slot * BLOCK_G + group) - best)
        total += weight * tl.load(total_ptr + slot * BLOCK_G + group)
        acc += weight[:, None] * tl.load(partial_ptr + (slot * BLOCK_G + group[:, None]) * HEAD_DIM + dims[None, :])
    heads = kv_head * GROUP + group
    target = out_ptr + row * stride_out + heads[:, None] * HEAD_DIM + dims[None, :]
    tl.store(target, (acc / total[:, None]).to(out_ptr.dtype.element_ty), (group < GROUP)[:, None])
