"""A device function replayed from CUDA graphs, one graph per input shape: what the pulse renderer's analysis and
the scoring's two speaker encoders share.

A cached cloned request is launch-bound on a GPU (on an H100 ~7,000 device events for 7 s of speech, the device
busy 25 of its 74 ms, docs/benchmarks.md): a replay costs about what its kernels take, where the eager call costs
a host launch for each. The callers' shapes sit on ladders (``voice.shapes``, ``pulse_graphs.FRAME_LADDER``), so
they recur and are few. A shape is captured the second time it comes, on that call's own inputs (one seen once
stays eager), timed against the eager call, both taken in turn, and kept only where the replay is faster. A
captured function must not read the device from the host: its shapes fix all its work. All graphs of a set share
one memory pool (they never run at the same time), bounded by ``max_bytes``; the engine counts each kept shape as
a holder of memory (not a leak), and the panel lists them with their memory and times.

A graph reads its function's weights and its library plans (cuFFT's) where they were at capture: a set is
released (``release``) whenever those are dropped, on Clean cache and on unloading a model.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from voicelab.backends.base import GraphBucket
from voicelab.backends.cuda_graphs import SideStream, capture, restore_generator_after_failed_capture, timed_in_turn
from voicelab.backends.cuda_graphs import warm_up as warm_up_on

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

CAPTURE_ON_USE = 2  # the use of a shape that captures it


@dataclass
class _Graphed:
    """One captured shape: its static inputs, the graph's outputs, and the graph (None: eager was as fast)."""

    inputs: tuple[torch.Tensor, ...]
    outputs: Any = None
    graph: torch.cuda.CUDAGraph | None = None


class ShapeGraphs:
    """One function's graphs on one CUDA device, keyed by shape; thread-safe (a replay's outputs are copied out
    under the lock)."""

    def __init__(self, stage: str, max_bytes: int, timing_runs: int = 1) -> None:
        self.stage = stage
        self.max_bytes = max_bytes
        self.timing_runs = timing_runs  # eager and replayed runs each, taken in turn, at capture
        self._lock = threading.Lock()
        self._graphed: dict[tuple[int, ...], _Graphed] = {}
        self._uses: Counter[tuple[int, ...]] = Counter()
        self._reports: list[GraphBucket] = []
        self._pool: Any = None  # torch.cuda.graph_pool_handle(), shared by every shape
        self._side = SideStream()  # every shape's warm-up and capture
        self._pool_bytes = 0
        self._broken = False

    def replayed(
        self, key: tuple[int, ...], fn: Callable[..., T], inputs: Sequence[torch.Tensor], copy_out: Callable[[T], R]
    ) -> R | None:
        """``copy_out(fn(*inputs))`` from ``key``'s graph, ``inputs`` copied into its static ones (their shapes are
        the key's), or None where ``key`` has no graph: seen once, as fast eagerly, past the memory bound, or after
        a failed capture; the caller then calls ``fn`` itself. ``key`` starts with (rows, length) for the panel."""
        if not inputs[0].is_cuda:
            return None
        with self._lock:
            graphed = self._graphed.get(key) or self._captured(key, fn, tuple(inputs))
            if graphed is None or graphed.graph is None:
                return None
            for static, given in zip(graphed.inputs, inputs, strict=True):
                static.copy_(given)
            graphed.graph.replay()
            return copy_out(graphed.outputs)

    def reports(self) -> tuple[GraphBucket, ...]:
        """Every shape captured so far (a copy: the heartbeat thread reads it)."""
        return tuple(self._reports)

    def release(self) -> int:
        """Drop every graph and its buffers so ``empty_cache`` can return the pool; returns the pool's bytes. Each
        shape is captured again on its second use after this."""
        with self._lock:
            released = self._pool_bytes
            self._graphed.clear()
            self._uses.clear()
            self._reports = []
            self._pool, self._pool_bytes = None, 0
            return released

    def _captured(
        self, key: tuple[int, ...], fn: Callable[..., T], inputs: tuple[torch.Tensor, ...]
    ) -> _Graphed | None:
        self._uses[key] += 1
        if self._broken or self._uses[key] < CAPTURE_ON_USE or self._pool_bytes >= self.max_bytes:
            return None
        static = tuple(t.clone() for t in inputs)
        try:
            self._graphed[key] = self._capture(key, lambda: fn(*static), static)
        except (RuntimeError, torch.cuda.OutOfMemoryError):
            log.warning("CUDA graph capture of the %s %s failed; it runs eagerly now", self.stage, key, exc_info=True)
            restore_generator_after_failed_capture()
            self._broken = True
            return None
        return self._graphed[key]

    def _capture(self, key: tuple[int, ...], call: Callable[[], T], static: tuple[torch.Tensor, ...]) -> _Graphed:
        """Warm up on the side stream, capture, time eager and replay in turn; keep the graph only if faster."""
        warm_up_on(call, self._side)
        self._pool = self._pool or torch.cuda.graph_pool_handle()
        before = pool_bytes(self._pool)
        graph, outputs = capture(call, self._pool, self._side)
        grown = pool_bytes(self._pool) - before
        self._pool_bytes += grown
        eager_ms, graph_ms = timed_in_turn(call, graph.replay, runs=self.timing_runs)
        kept = graph_ms < eager_ms
        self._reports.append(GraphBucket(self.stage, key[0], key[1], grown, eager_ms, graph_ms, kept))
        log.info("CUDA graph %s %s: eager %.2f ms, graph %.2f ms", self.stage, key, eager_ms, graph_ms)
        return _Graphed(static, outputs, graph) if kept else _Graphed(())


def pool_bytes(pool: Any) -> int:
    """The device memory a graph pool holds: its segments in the allocator's snapshot."""
    wanted = tuple(pool)
    return sum(s["total_size"] for s in torch.cuda.memory_snapshot() if tuple(s.get("segment_pool_id", ())) == wanted)
