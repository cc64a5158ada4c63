"""What the CUDA graphs share: the bucket a size pads to, the warm-up and capture every graph goes through, and the
device time that decides whether a captured graph beats the eager call it replaces (Piper's stages, CosyVoice's flow
estimator and vocoder, the pulse renderer's analysis)."""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

T = TypeVar("T")

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


def timed_in_turn(
    eager: Callable[[], object], replay: Callable[[], object], runs: int = TIMING_RUNS
) -> tuple[float, float]:
    """Device ms of the eager call and of the graph's replay, each the fastest of ``runs``, the two taken in turn.

    Whether a graph is kept is decided once, for the life of the process, so the decision must survive a busy
    moment: another process on the same device (the benches' second worker loading, say) only adds time, and a
    median of one side's runs taken while it was busy against the other's taken after made a faster graph look
    slower. Taken in turn, both sides see the same moments, and the minimum drops the busy ones."""
    eager_ms, graph_ms = [], []
    for _ in range(runs):
        eager_ms.append(device_ms(eager, runs=1))
        graph_ms.append(device_ms(replay, runs=1))
    return min(eager_ms), min(graph_ms)


class SideStream:
    """The one stream a set of graphs warms up and captures on, made on first use (CUDA only).

    cuBLAS and cuBLASLt keep a workspace per handle and stream for the life of the process (32 MiB and more each on
    Hopper, never returned to the allocator), and PyTorch hands out new streams from a pool of 32 per device: a new
    stream for every bucket's warm-up left a workspace behind for each of them, up to the pool's 32. One stream per
    graph set keeps it to one."""

    def __init__(self) -> None:
        self._stream: torch.cuda.Stream | None = None

    @property
    def stream(self) -> torch.cuda.Stream:
        if self._stream is None:
            self._stream = torch.cuda.Stream()
        return self._stream


def warm_up(fn: Callable[[], object], side: SideStream, times: int = 1) -> None:
    """``fn`` run ``times`` on the set's side stream, as a capture needs: lazy initialisation, cuBLAS and cuDNN
    plans and the allocator's first blocks all happen outside the graph."""
    stream = side.stream
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(times):
            fn()
    torch.cuda.current_stream().wait_stream(stream)


def capture(fn: Callable[[], T], pool: Any, side: SideStream) -> tuple[torch.cuda.CUDAGraph, T]:
    """One call of ``fn`` captured into a graph on ``pool`` (on the set's side stream), and that call's outputs
    (the graph's output buffers). thread_local: other threads (the worker's heartbeat reading allocator stats,
    requests side by side) keep going while this one captures."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, stream=side.stream, capture_error_mode="thread_local"):
        outputs = fn()
    return graph, outputs


def restore_generator_after_failed_capture() -> None:
    """A capture that fails (a host sync inside it, say) leaves the default CUDA generator in capture mode: torch
    skips its epilogue, and every later random draw on the device raises "Offset increment outside graph capture
    encountered unexpectedly" (seen on the H200 in CosyVoice's vocoder). One trivial capture that succeeds ends it."""
    scratch = torch.zeros(1, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        scratch.add_(1)
