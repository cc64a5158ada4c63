"""``pulse.analyse`` replayed from CUDA graphs: one replay in place of some hundreds of kernel launches.

The ``pulse`` renderer's analysis (YIN, CheapTrick, D4C) is launch-bound on a GPU: on the H200 it took 13-16 ms
eager against ~2 ms replayed, whatever the chunk's length, and a cloned request analyses once per renderer call
(docs/benchmarks.md). Once its frame count is known it has no host sync, so it is captured per bucket of (rows,
frames): frames on a ladder ~25 % apart up to 12 s, rows 1, 2, 4 or 8.

A bucket is captured the second time a batch needs it, on that batch (``backends.shape_graphs``; capturing every
bucket at load, on a synthetic buzz, broke a later cuFFT call on the H200). It is timed against one eager analysis
(an eager analysis takes 13-16 ms, so three timed runs were most of a capture's 54-65 ms on an H100) and kept only
if its replay is faster. Padding rows repeat the first row; padding frames lie past every row's end, are never
read, and are cut from the outputs, so a replayed analysis equals the eager one. The pool is bounded by
``max_bytes``; the panel lists the buckets with their memory and times, as it does Piper's."""

from __future__ import annotations

import functools
from dataclasses import replace

import torch

from voicelab.backends.base import GraphBucket
from voicelab.backends.cuda_graphs import bucket_for
from voicelab.backends.shape_graphs import ShapeGraphs
from voicelab.voice import pulse
from voicelab.voice.shapes import rounded_up

STAGE = "pulse analysis"
ROW_BUCKETS = (1, 2, 4, 8)  # a request's first chunk alone, its later chunks together (``engine.chunk_render``)
FRAME_LADDER = tuple(rounded_up(round(256 * 1.25**k), pulse.FRAME_BUCKET) for k in range(11))  # to 12 s
MAX_ROWS_X_FRAMES = 8192  # about 41 s of padded audio: larger batches stay eager (a bucket's memory grows with it)


class AnalysisGraphs:
    """``pulse.Analyser`` on one CUDA device; thread-safe."""

    def __init__(self, max_bytes: int = 768 << 20) -> None:
        self._graphs = ShapeGraphs(STAGE, max_bytes)

    def __call__(self, x: torch.Tensor, lengths: torch.Tensor, sr: int) -> pulse.PulseFeatures:
        """``pulse.analyse(x, lengths, sr)``, from a graph where its bucket has one."""
        frames = pulse.analysis_frames(lengths, round(pulse.FRAME_S * sr))
        rows, padded = bucket_for(ROW_BUCKETS, x.shape[0]), bucket_for(FRAME_LADDER, frames)
        if x.is_cuda and rows is not None and padded is not None and rows * padded <= MAX_ROWS_X_FRAMES:
            inputs = _padded(x, lengths, rows, padded * round(pulse.FRAME_S * sr))
            analysis = functools.partial(pulse.analyse, sr=sr, frames=padded)
            cut = functools.partial(_cut, rows=x.shape[0], frames=frames, lengths=lengths)
            replayed = self._graphs.replayed((rows, padded, sr), analysis, inputs, cut)
            if replayed is not None:
                return replayed
        return pulse.analyse(x, lengths, sr, frames)

    def reports(self) -> tuple[GraphBucket, ...]:
        """Every bucket captured so far."""
        return self._graphs.reports()

    def release(self) -> int:
        """Drop every graph (Clean cache); returns the pool's bytes."""
        return self._graphs.release()


def _padded(x: torch.Tensor, lengths: torch.Tensor, rows: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch at the bucket's size: spare rows repeat the first (a real row: nothing degenerate); columns past
    the bucket's width are past every row's end (zeros), so they are left out."""
    columns = min(x.shape[1], width)
    padded = x.new_zeros(rows, width)
    padded[:, :columns] = x[:1, :columns]
    padded[: x.shape[0], :columns] = x[:, :columns]
    spare = lengths[:1].expand(rows - len(lengths))
    return padded, torch.cat([lengths, spare])


def _cut(features: pulse.PulseFeatures, rows: int, frames: int, lengths: torch.Tensor) -> pulse.PulseFeatures:
    """The batch's own rows and frames of a replay's outputs, copied out of the graph's buffers."""
    return replace(
        features,
        f0=features.f0[:rows, :frames].clone(),
        envelope=features.envelope[:rows, :frames].clone(),
        aperiodicity=features.aperiodicity[:rows, :frames].clone(),
        lengths=lengths,
    )
