"""The speech-token LLM's decode step, replayed from its CUDA graphs, built in several ways side by side in one run.

    python -m tools.cosyvoice_step_times --model-dir DIR [--code DIR] [--dtype float32] [--device cuda] [--replays 300]
        [--sides torch,triton] [--shapes 1x256,1x512,...]

Sides: ``one-matmul`` (PyTorch's kernels, the attention's sum over cached values as one matmul at every length, as
before ``static_qwen.VALUE_CHUNK``), ``torch`` (the default step) and ``triton`` (``decode_kernels=triton``: the
layers as ``fused_step``'s Triton kernels; on a CPU only under ``TRITON_INTERPRET=1``) and ``auto`` (the default:
both captured, the faster kept per shape, ``step_choice``; its cells name the side chosen). For each side the step
graphs of ``StepRunner`` (16 slots, every row and length bucket) are captured over a cache of random keys and
values; printed per (rows, length bucket): ms per replay of each side, and the largest difference between each
side's log-probabilities and the first side's for the same tokens at positions in the bucket's second half.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from tools.cosyvoice_decode import load_llm

SHAPES = ((1, 256), (1, 512), (1, 1024), (1, 2048), (4, 512), (16, 512), (16, 1024))
SIDES = ("one-matmul", "torch", "triton", "auto")


@contextmanager
def one_matmul() -> Iterator[None]:
    """The step's value sum as one matmul at every length (what it was before the partial sums)."""
    from voicelab.backends.cosyvoice import static_qwen

    kept = static_qwen.MIN_VALUE_PARTS
    static_qwen.MIN_VALUE_PARTS = 1 << 30
    try:
        yield
    finally:
        static_qwen.MIN_VALUE_PARTS = kept


def replay_ms(runner: Any, rows: int, length: int, replays: int) -> float:
    import torch

    sync = torch.cuda.synchronize if runner.cache.keys.is_cuda else (lambda: None)
    for _ in range(10):
        runner.step(length, rows)
    sync()
    started = time.perf_counter()
    for _ in range(replays):
        runner.step(length, rows)
    sync()
    return 1000 * (time.perf_counter() - started) / replays


Shape = tuple[int, int]


def side(
    llm: Any, replays: int, kernels: str, shapes: Sequence[Shape]
) -> tuple[dict[Shape, float], dict[Shape, Any], dict[Shape, str]]:
    """Replay ms (eager steps off CUDA) and log-probabilities (for fixed tokens and positions) of every (rows,
    length) shape, and the kernels each shape's graph runs."""
    import torch

    from voicelab.backends.cosyvoice.kv_cache import QwenShape, StaticKvCache
    from voicelab.backends.cosyvoice.step_graphs import StepRunner

    device = llm.llm_decoder.weight.device
    gen = torch.Generator(device=device).manual_seed(0)
    dtype = llm.llm_decoder.weight.dtype
    cache = StaticKvCache(QwenShape.of(llm.llm.model.config), 16, 2048, dtype, device)
    runner = StepRunner(llm, cache, graphs=True, shrink_rows=True, kernels=kernels)
    cache.keys.normal_(generator=gen)  # after the capture: auto's choice clears the cache it tried the sides on
    cache.values.normal_(generator=gen)
    times, logp = {}, {}
    for rows, length in shapes:
        times[rows, length] = replay_ms(runner, rows, length, replays)
        runner.tokens.copy_(torch.randint(0, 6000, (16,), device=device, generator=gen))
        runner.positions.copy_(torch.randint(length // 2, length, (16,), device=device, generator=gen))
        logp[rows, length] = runner.step(length, rows)[:rows].float().clone()
    chosen = {(rows, length): runner.kernels_for.get(runner.shape_of(length, rows), "eager") for rows, length in shapes}
    return times, logp, chosen


def main(argv: Sequence[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(prog="python -m tools.cosyvoice_step_times", description=__doc__)
    parser.add_argument("--model-dir", required=True, help="a CosyVoice2/3 model directory (random_model output)")
    parser.add_argument("--code", default="", help="an upstream FunAudioLLM/CosyVoice checkout")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--device", default="cuda", help="cuda (graphs), or cpu to try the tool (eager steps)")
    parser.add_argument("--replays", type=int, default=300)
    parser.add_argument("--sides", default="torch,triton", help=f"comma-separated, from {', '.join(SIDES)}")
    parser.add_argument("--shapes", default=",".join(f"{r}x{n}" for r, n in SHAPES), help="rows x positions, ...")
    args = parser.parse_args(argv)
    sides = args.sides.split(",")
    if not sides or any(name not in SIDES for name in sides):
        parser.error(f"--sides takes names from {', '.join(SIDES)}, not {args.sides!r}")
    try:
        shapes = [(int(rows), int(length)) for rows, length in (item.split("x") for item in args.shapes.split(","))]
    except ValueError:
        parser.error(f"--shapes takes rows x positions such as 1x512,16x1024, not {args.shapes!r}")
    if not all(1 <= rows <= 16 and 2 <= length <= 2048 for rows, length in shapes):
        parser.error("--shapes: 1 to 16 rows (the cache's slots) and 2 to 2,048 positions (its capacity)")
    llm = load_llm(Path(args.model_dir), args.code, args.device, args.dtype)
    results = {}
    with torch.inference_mode():
        for name in sides:
            with one_matmul() if name == "one-matmul" else nullcontext():
                results[name] = side(llm, args.replays, name if name in ("triton", "auto") else "torch", shapes)
    first = results[sides[0]][1]
    print(f"decode step, {args.dtype}, ms per replay: {' | '.join(sides)} (max |d log p| against {sides[0]})")
    for shape in shapes:
        cells = [f"{results[name][0][shape]:6.3f}" + (f" ({results[name][2][shape]})" if name == "auto" else "")
                 for name in sides]  # fmt: skip
        diffs = [f"{float((results[name][1][shape] - first[shape]).abs().max()):.1e}" for name in sides[1:]]
        print(f"  {shape[0]:>2} rows x {shape[1]:>4} positions: {' | '.join(cells)}  ({', '.join(diffs) or '-'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
