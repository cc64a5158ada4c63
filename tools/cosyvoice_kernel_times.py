"""The decode step's Triton kernels alone against the PyTorch calls they replace, at the speech-token LLM's shapes.

    python -m tools.cosyvoice_kernel_times [--device cuda] [--dtype float32] [--rows 1,4,16] [--sweep]
        [--dims 896,4864] [--positions 256,512,1024]

For each projection of a layer (q/k/v, output, gate/up with the SiLU gate, down) at each row count: microseconds
per call of PyTorch's RMSNorm + ``F.linear`` (+ gate) and of ``fused_step.linear`` (the norm folded in), each
replayed from a CUDA graph of 50 calls, and the weight bytes each streams per second. The attention: PyTorch's SDPA
over the cached positions against ``fused_step.attention`` (split, then combined). ``--sweep`` also times the
launcher's block settings (``VECTOR_TILE`` and ``TARGET_PROGRAMS`` for one row, ``DOT_K`` for more) and prints the
fastest beside the default. ``--dims`` are hidden and intermediate sizes (Qwen2.5-0.5B's by default); off a GPU the
kernels run only under ``TRITON_INTERPRET=1``, timed eagerly, to try the tool on small ``--dims``.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

HEADS, KV_HEADS, HEAD_DIM = 14, 2, 64  # Qwen2.5-0.5B's attention, the body of CosyVoice2's LLM
CALLS = 50  # calls per captured graph
TILES, PROGRAMS, DOT_KS = (2048, 4096, 8192, 16384), (132, 264, 528, 1056), (32, 64, 128)


def per_call_us(fn: Callable[[], Any], device: str) -> float:
    """Microseconds per call: replays of a graph of ``CALLS`` calls on CUDA, eager calls elsewhere."""
    import torch

    fn()
    if device != "cuda":
        started = time.perf_counter()
        for _ in range(3):
            fn()
        return (time.perf_counter() - started) / 3 * 1e6
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            fn()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / 5 / CALLS


@contextmanager
def settings(tile: int, programs: int, dot_k: int) -> Iterator[None]:
    """The launchers' block settings for the duration (module constants, restored after); ``tile`` is the vector
    form's (one row) and the broadcast form's (a few float32 rows)."""
    from voicelab.backends.cosyvoice import fused_step, step_kernels

    kept = fused_step.VECTOR_TILE, fused_step.BROADCAST_TILE, step_kernels.TARGET_PROGRAMS, fused_step.DOT_K
    fused_step.VECTOR_TILE = fused_step.BROADCAST_TILE = tile
    step_kernels.TARGET_PROGRAMS, fused_step.DOT_K = programs, dot_k
    try:
        yield
    finally:
        fused_step.VECTOR_TILE, fused_step.BROADCAST_TILE, step_kernels.TARGET_PROGRAMS, fused_step.DOT_K = kept


def projections(hidden: int, intermediate: int) -> dict[str, tuple[int, int, bool]]:
    """name -> (N, K, gated) of one layer's matmuls."""
    qkv = (HEADS + 2 * KV_HEADS) * HEAD_DIM
    return {
        "q/k/v": (qkv, hidden, False),
        "output": (hidden, HEADS * HEAD_DIM, False),
        "gate/up": (2 * intermediate, hidden, True),
        "down": (hidden, intermediate, False),
    }


def linear_row(name: str, n: int, k: int, glu: bool, rows: int, args: argparse.Namespace) -> str:
    import torch
    import torch.nn.functional as F

    from voicelab.backends.cosyvoice import fused_step

    dtype = getattr(torch, args.dtype)
    x = torch.randn(rows, k, device=args.device, dtype=dtype)
    weight = torch.randn(n, k, device=args.device, dtype=dtype) * k**-0.5
    norm = fused_step.Norm(torch.ones(k, device=args.device, dtype=dtype), 1e-6)

    def pytorch() -> Any:
        y = F.linear(F.rms_norm(x, (k,), norm.weight, norm.eps), weight)
        if glu:
            gate, up = y.chunk(2, dim=-1)
            return F.silu(gate) * up
        return y

    def fused() -> Any:
        return fused_step.linear(x, weight, norm=norm, glu=glu)

    gigabytes = weight.numel() * weight.element_size() / 1e3  # per microsecond: GB/s
    error = float((fused().float() - pytorch().float()).abs().max())
    theirs, ours = per_call_us(pytorch, args.device), per_call_us(fused, args.device)
    line = (
        f"  {name:>7} {n:>5}x{k:<5} {rows:>2} rows: pytorch {theirs:8.1f} us ({gigabytes / theirs:5.0f} GB/s)"
        f"  triton {ours:8.1f} us ({gigabytes / ours:5.0f} GB/s, max |d| {error:.1e})"
    )
    if args.sweep:
        tiled = rows == 1 or (args.dtype == "float32" and rows <= fused_step.BROADCAST_ROWS)  # not tl.dot
        tile = fused_step.VECTOR_TILE if rows == 1 else fused_step.BROADCAST_TILE
        grid = (
            itertools.product(TILES, PROGRAMS, (fused_step.DOT_K,))
            if tiled
            else itertools.product((tile,), PROGRAMS, DOT_KS)
        )
        timed = []
        for tile, programs, dot_k in grid:
            with settings(tile, programs, dot_k):
                timed.append((per_call_us(fused, args.device), tile, programs, dot_k))
        best = min(timed)
        line += f"  best {best[0]:8.1f} us (tile {best[1]}, programs {best[2]}, dot_k {best[3]})"
    return line


def attention_row(rows: int, length: int, args: argparse.Namespace) -> str:
    import torch
    import torch.nn.functional as F

    from voicelab.backends.cosyvoice import fused_step

    dtype = getattr(torch, args.dtype)
    capacity, group = max(length, 2048), HEADS // KV_HEADS
    query = torch.randn(rows, HEADS * HEAD_DIM, device=args.device, dtype=dtype)
    keys = torch.randn(rows, KV_HEADS, capacity, HEAD_DIM, device=args.device, dtype=dtype)
    values = torch.randn_like(keys)
    positions = torch.full((rows,), length - 1, device=args.device, dtype=torch.long)
    scale = HEAD_DIM**-0.5

    def pytorch() -> Any:
        k = keys[:, :, :length].repeat_interleave(group, dim=1)
        v = values[:, :, :length].repeat_interleave(group, dim=1)
        return F.scaled_dot_product_attention(query.view(rows, HEADS, 1, HEAD_DIM), k, v, scale=scale)

    def fused() -> Any:
        return fused_step.attention(query, keys, values, positions, length, scale)

    expected = pytorch().reshape(rows, -1).float()
    error = float((fused().float() - expected).abs().max())
    theirs, ours = per_call_us(pytorch, args.device), per_call_us(fused, args.device)
    shape = f"{rows:>2} rows x {length:>4} positions"
    return f"  {shape}: sdpa {theirs:8.1f} us  triton {ours:8.1f} us  (max |d| {error:.1e})"


def _ints(text: str) -> list[int]:
    return [int(item) for item in text.split(",") if item]


def main(argv: Sequence[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(prog="python -m tools.cosyvoice_kernel_times", description=__doc__)
    parser.add_argument("--device", default="cuda", help="cuda (graphs), or cpu under TRITON_INTERPRET=1 (eager)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--rows", type=_ints, default=[1, 4, 16], help="decode rows, comma-separated")
    parser.add_argument("--positions", type=_ints, default=[256, 512, 1024], help="the attention's cached positions")
    parser.add_argument("--dims", type=_ints, default=[896, 4864], help="hidden,intermediate sizes")
    parser.add_argument("--sweep", action="store_true", help="also time the launchers' block settings")
    args = parser.parse_args(argv)
    if len(args.dims) != 2 or any(rows > 64 for rows in args.rows):
        parser.error("--dims takes hidden,intermediate; --rows at most 64 (the fused linear's largest)")
    print(f"decode-step kernels alone, {args.dtype} on {args.device}, us per call")
    with torch.inference_mode():
        for (name, (n, k, glu)), rows in itertools.product(projections(*args.dims).items(), args.rows):
            print(linear_row(name, n, k, glu, rows, args))
        for rows, length in itertools.product(args.rows, args.positions):
            print(attention_row(rows, length, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
