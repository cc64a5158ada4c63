"""What the backends' bucketed CUDA graphs share: the bucket a size pads to, and the device time that decides
whether a captured graph beats the eager call it replaces (Piper's stages, CosyVoice's flow estimator)."""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Callable, Sequence

import torch

TIMING_RUNS = 3


def bucket_for(sizes: Sequence[int], n: int) -> int | None:
    """The smallest bucket holding ``n`` (None: larger than every bucket)."""
    i = bisect.bisect_left(sizes, n)
    return sizes[i] if i < len(sizes) else None


def device_ms(fn: Callable[[], object], runs: int = TIMING_RUNS) -> float:
    """Median device time of ``runs`` calls of ``fn``, by CUDA events (milliseconds)."""
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def restore_generator_after_failed_capture() -> None:
    """A capture that fails (a host sync inside it, say) leaves the default CUDA generator in capture mode: torch
    skips its epilogue, and every later random draw on the device raises "Offset increment outside graph capture
    encountered unexpectedly" (seen on the H200 in CosyVoice's vocoder). One trivial capture that succeeds ends it."""
    scratch = torch.zeros(1, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        scratch.add_(1)
