"""The decode step's kernels from ``step_kernels`` (Triton) launched with block sizes chosen by shape alone.

Imported only where the backend option ``decode_kernels=triton`` asks for them: Triton comes with PyTorch's CUDA
builds, not with the CPU build of the default install. Off a GPU the kernels run only under Triton's interpreter
(``TRITON_INTERPRET=1``, what the CPU tests use).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from voicelab.backends.cosyvoice import step_kernels as kernels

ROW_BLOCK_DOT = 16  # ``tl.dot`` needs 16 rows or more: 2..16 decode rows are padded to 16
# One row (the vector form): a weight tile of this many elements per iteration, ~32 KiB in float32, so that each
# multiprocessor keeps enough bytes in flight to cover the memory's latency (a matrix-vector product is a stream).
VECTOR_TILE = 8192
DOT_K = 128
BROADCAST_ROWS = 16  # float32 rows up to this many take the broadcast form (``_blocks``)
BROADCAST_TILE = 8192  # elements of its (rows, columns, K) product per iteration: 32 float32 registers a thread
ATTENTION_POSITIONS = 64  # positions per inner iteration of the attention
MAX_ROWS = 64  # the backend's largest ``decode_slots``


def _power_of_two_at_most(value: int) -> int:
    return 1 << max(0, value.bit_length() - 1)


def _column_block(n: int, smallest: int) -> int:
    """Output columns per program: about ``TARGET_PROGRAMS`` programs, ``smallest`` to 64 columns each."""
    return min(64, max(smallest, _power_of_two_at_most(max(1, n // kernels.TARGET_PROGRAMS))))


def _blocks(rows: int, n: int, k: int, ieee: bool) -> tuple[int, int, int, int, int]:
    """(FORM, BLOCK_M, BLOCK_N, BLOCK_K, warps) for a linear of ``rows`` x K -> N. Float32 (``ieee``) up to
    ``BROADCAST_ROWS`` rows broadcasts over them on the CUDA cores: its ``tl.dot`` took 6.1-6.8 ms a step at every
    row count on an H100, where cuBLAS took 2.4-5.0 (2026-12-05)."""
    if rows == 1:
        block_n = _column_block(n, 4)
        block_k = min(1 << (k - 1).bit_length(), max(64, VECTOR_TILE // block_n))
        return kernels.VECTOR, 1, block_n, block_k, 8 if block_n * block_k >= 8192 else 4
    block_m = 1 << (rows - 1).bit_length()
    if ieee and rows <= BROADCAST_ROWS:
        block_n = _column_block(n, 4)
        block_k = min(1 << (k - 1).bit_length(), max(16, BROADCAST_TILE // (block_m * block_n)))
        return kernels.BROADCAST, block_m, block_n, block_k, 8
    return kernels.DOT, max(ROW_BLOCK_DOT, block_m), _column_block(n, 16), DOT_K, 4


@dataclass(frozen=True)
class Norm:
    """An RMSNorm folded into a linear kernel: its weight and epsilon (transformers' ``Qwen2RMSNorm``)."""

    weight: torch.Tensor
    eps: float


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    *,
    norm: Norm | None = None,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    glu: bool = False,
) -> torch.Tensor:
    """``residual + norm(x) @ weight.T + bias``, (rows, N); with ``glu``, ``silu(g) * u`` where ``g`` and ``u`` are
    the products with the weight's first and second halves (rows, N / 2)."""
    rows, k = x.shape
    if rows > MAX_ROWS or x.stride(1) != 1 or weight.stride(1) != 1:
        raise ValueError(f"the fused linear takes up to {MAX_ROWS} rows with contiguous K, not {tuple(x.shape)}")
    n = weight.shape[0] // 2 if glu else weight.shape[0]
    out = torch.empty(rows, n, dtype=x.dtype, device=x.device)
    ieee = weight.dtype == torch.float32
    form, block_m, block_n, block_k, warps = _blocks(rows, n, k, ieee)
    grid = (triton_cdiv(n, block_n),)
    kernels._linear[grid](
        x, weight, out, bias if bias is not None else out, residual if residual is not None else out,
        norm.weight if norm is not None else out,
        rows, n, n, norm.eps if norm is not None else 0.0,
        x.stride(0), weight.stride(0), out.stride(0), residual.stride(0) if residual is not None else 0,
        K=k, NORM=norm is not None, BIAS=bias is not None, RESIDUAL=residual is not None, GLU=glu,
        IEEE=ieee, FORM=form, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps,
    )  # fmt: skip
    return out


def rotary_write(
    qkv: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    positions: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    heads: int,
) -> torch.Tensor:
    """Rotary on the (rows, (heads + 2 kv_heads) x head_dim) projections; each row's key and value written into
    ``keys``/``values`` (one layer of the cache: slots, kv_heads, capacity, head_dim) at its position. Returns the
    rotated queries, (rows, heads x head_dim)."""
    rows = qkv.shape[0]
    kv_heads, head_dim = keys.shape[1], keys.shape[3]
    query = torch.empty(rows, heads * head_dim, dtype=qkv.dtype, device=qkv.device)
    cos, sin = cos.reshape(rows, head_dim).contiguous(), sin.reshape(rows, head_dim).contiguous()
    kernels._rotary_write[(rows, heads + kv_heads)](
        qkv, cos, sin, positions, query, keys, values,
        qkv.stride(0), cos.stride(0), query.stride(0), keys.stride(0), keys.stride(1), keys.stride(2),
        HEADS=heads, KV_HEADS=kv_heads, HALF=head_dim // 2,
    )  # fmt: skip
    return query


def attention(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    positions: torch.Tensor,
    length: int,
    scale: float,
) -> torch.Tensor:
    """Each row's (heads x head_dim) queries over its slot's first ``length`` cached positions, those at or before
    its own position visible, grouped-query heads reading their key/value head; (rows, heads x head_dim)."""
    rows, kv_heads, head_dim = query.shape[0], keys.shape[1], keys.shape[3]
    group = query.shape[1] // head_dim // kv_heads
    block_g = max(16, 1 << (group - 1).bit_length())
    pairs = rows * kv_heads
    blocks = triton_cdiv(length, ATTENTION_POSITIONS)
    per_split = triton_cdiv(blocks, min(blocks, max(1, kernels.TARGET_PROGRAMS // pairs)))
    split = per_split * ATTENTION_POSITIONS
    splits = triton_cdiv(length, split)
    out = torch.empty_like(query)
    partial = (pairs * splits, block_g)
    best = torch.empty(partial, dtype=torch.float32, device=query.device)
    total = torch.empty(partial, dtype=torch.float32, device=query.device)
    weighted = torch.empty((*partial, head_dim), dtype=torch.float32, device=query.device)
    ieee = keys.dtype == torch.float32
    kernels._attention[(pairs, splits)](
        query, keys, values, positions, out, best, total, weighted,
        length, scale, query.stride(0), keys.stride(0), keys.stride(1), keys.stride(2),
        KV_HEADS=kv_heads, GROUP=group, BLOCK_G=block_g, HEAD_DIM=head_dim,
        BLOCK_P=ATTENTION_POSITIONS, SPLIT=split, SPLITS=splits, IEEE=ieee,
    )  # fmt: skip
    if splits > 1:
        kernels._combine[(pairs,)](
            best, total, weighted, out, out.stride(0),
            KV_HEADS=kv_heads, GROUP=group, BLOCK_G=block_g, HEAD_DIM=head_dim, SPLITS=splits,
        )  # fmt: skip
    return out


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)
