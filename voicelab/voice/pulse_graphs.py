"""``pulse.analyse`` replayed from CUDA graphs: one replay in place of some hundreds of kernel launches.

The ``pulse`` renderer's analysis (YIN, CheapTrick, D4C) is launch-bound on a GPU: on the H200 it took 13-16 ms
eager against ~2 ms replayed, whatever the chunk's length, and a cloned request analyses once per renderer call
(docs/benchmarks.md). Once its frame count is known it has no host sync, so it is captured per bucket of (rows,
frames): frames on a ladder ~25 % apart up to 12 s, rows 1, 2, 4 or 8.

A bucket is captured the second time a batch needs it, on that batch: a shape seen once stays eager (and capturing
every bucket at load, on a synthetic buzz, broke a later cuFFT call on the H200). It is timed against one eager
analysis (the warm-up's run made its plans; an eager analysis takes 13-16 ms, so three timed runs were most of a
capture's 54-65 ms on an H100) and kept only if its replay is faster. Padding rows repeat the first row; padding
frames lie past every row's end, are never read, and are cut from the outputs, so a replayed analysis equals the
eager one. All graphs share one memory pool (they never run at the same time), bounded by ``max_bytes``; the engine
counts each bucket as a holder of memory (not a leak), and the panel lists them with their memory and times, as it
does Piper's."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

import torch

from voicelab.backends.base import GraphBucket
from voicelab.backends.cuda_graphs import (
    SideStream,
    bucket_for,
    capture,
    device_ms,
    restore_generator_after_failed_capture,
    warm_up,
)
from voicelab.voice import pulse
from voicelab.voice.shapes import rounded_up

log = logging.getLogger(__name__)

STAGE = "pulse analysis"
ROW_BUCKETS = (1, 2, 4, 8)  # a request's first chunk alone, its later chunks together (``engine.chunk_render``)
FRAME_LADDER = tuple(rounded_up(round(256 * 1.25**k), pulse.FRAME_BUCKET) for k in range(11))  # to 12 s
MAX_ROWS_X_FRAMES = 8192  # about 41 s of padded audio: larger batches stay eager (a bucket's memory grows with it)
CAPTURE_ON_USE = 2  # the use of a bucket that captures it


@dataclass
class _Bucket:
    """One captured shape: its static inputs, the graph's outputs, and the graph (None: eager was as fast)."""

    x: torch.Tensor
    lengths: torch.Tensor
    features: pulse.PulseFeatures | None = None
    graph: torch.cuda.CUDAGraph | None = None


class AnalysisGraphs:
    """``pulse.Analyser`` on one CUDA device; thread-safe (a replay's outputs are copied out under the lock)."""

    def __init__(self, max_bytes: int = 768 << 20) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._buckets: dict[tuple[int, int, int], _Bucket] = {}
        self._uses: Counter[tuple[int, int, int]] = Counter()
        self._reports: list[GraphBucket] = []
        self._pool: Any = None  # torch.cuda.graph_pool_handle(), shared by every bucket
        self._side = SideStream()  # every bucket's warm-up and capture
        self._pool_bytes = 0
        self._broken = False

    def __call__(self, x: torch.Tensor, lengths: torch.Tensor, sr: int) -> pulse.PulseFeatures:
        """``pulse.analyse(x, lengths, sr)``, from a graph where its bucket has one."""
        frames = pulse.analysis_frames(lengths, round(pulse.FRAME_S * sr))
        rows, padded = bucket_for(ROW_BUCKETS, x.shape[0]), bucket_for(FRAME_LADDER, frames)
        if not x.is_cuda or rows is None or padded is None or rows * padded > MAX_ROWS_X_FRAMES:
            return pulse.analyse(x, lengths, sr, frames)
        with self._lock:
            bucket = self._bucket((rows, padded, sr), x, lengths)
            if bucket is None or bucket.graph is None or bucket.features is None:
                return pulse.analyse(x, lengths, sr, frames)
            _fill(bucket, x, lengths)
            bucket.graph.replay()
            return _cut(bucket.features, x.shape[0], frames, lengths)

    def reports(self) -> tuple[GraphBucket, ...]:
        """Every bucket captured so far (a copy: the heartbeat thread reads it)."""
        return tuple(self._reports)

    def release(self) -> int:
        """Drop every graph and its buffers so ``empty_cache`` can return the pool; returns the pool's bytes. Each
        bucket is captured again on its second use after this."""
        with self._lock:
            released = self._pool_bytes
            self._buckets.clear()
            self._uses.clear()
            self._reports = []
            self._pool, self._pool_bytes = None, 0
            return released

    def _bucket(self, key: tuple[int, int, int], x: torch.Tensor, lengths: torch.Tensor) -> _Bucket | None:
        if key in self._buckets:
            return self._buckets[key]
        self._uses[key] += 1
        if self._broken or self._uses[key] < CAPTURE_ON_USE or self._pool_bytes >= self.max_bytes:
            return None
        rows, frames, sr = key
        static = _Bucket(x.new_zeros(rows, frames * round(pulse.FRAME_S * sr)), lengths.new_zeros(rows))
        _fill(static, x, lengths)
        try:
            self._buckets[key] = self._capture(static, frames, sr)
        except (RuntimeError, torch.cuda.OutOfMemoryError):
            log.warning("CUDA graph capture of the pulse analysis %s failed; it runs eagerly now", key, exc_info=True)
            restore_generator_after_failed_capture()
            self._broken = True
            return None
        return self._buckets[key]

    def _capture(self, static: _Bucket, frames: int, sr: int) -> _Bucket:
        """Warm up on a side stream, time eager, capture, time the replay; keep the graph only if it is faster."""

        def analysis() -> pulse.PulseFeatures:
            return pulse.analyse(static.x, static.lengths, sr, frames)

        warm_up(analysis, self._side)
        eager_ms = device_ms(analysis, runs=1)
        self._pool = self._pool or torch.cuda.graph_pool_handle()
        before = pool_bytes(self._pool)
        graph, features = capture(analysis, self._pool, self._side)
        grown = pool_bytes(self._pool) - before
        self._pool_bytes += grown
        graph_ms = device_ms(graph.replay)
        kept = graph_ms < eager_ms
        self._reports.append(GraphBucket(STAGE, len(static.lengths), frames, grown, eager_ms, graph_ms, kept))
        log.info("CUDA graph %s rows=%d frames=%d: eager %.2f ms, graph %.2f ms", STAGE, len(static.lengths), frames,
                 eager_ms, graph_ms)  # fmt: skip
        return replace(static, features=features, graph=graph) if kept else replace(static, x=static.x[:0])


def pool_bytes(pool: Any) -> int:
    """The device memory a graph pool holds: its segments in the allocator's snapshot."""
    wanted = tuple(pool)
    return sum(s["total_size"] for s in torch.cuda.memory_snapshot() if tuple(s.get("segment_pool_id", ())) == wanted)


def _fill(bucket: _Bucket, x: torch.Tensor, lengths: torch.Tensor) -> None:
    """The batch into the bucket's static inputs; spare rows repeat the first (a real row: nothing degenerate).
    Columns past the bucket's width are past every row's end (zeros), so they are left out."""
    rows, width = x.shape[0], min(x.shape[1], bucket.x.shape[1])
    x = x[:, :width]
    bucket.x.zero_()
    bucket.x[:rows, :width].copy_(x)
    bucket.x[rows:, :width].copy_(x[:1].expand(bucket.x.shape[0] - rows, -1))
    bucket.lengths.copy_(lengths[:1].expand_as(bucket.lengths))
    bucket.lengths[:rows].copy_(lengths)


def _cut(features: pulse.PulseFeatures, rows: int, frames: int, lengths: torch.Tensor) -> pulse.PulseFeatures:
    """The batch's own rows and frames of a replay's outputs, copied out of the graph's buffers."""
    return replace(
        features,
        f0=features.f0[:rows, :frames].clone(),
        envelope=features.envelope[:rows, :frames].clone(),
        aperiodicity=features.aperiodicity[:rows, :frames].clone(),
        lengths=lengths,
    )
