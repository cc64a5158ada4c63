"""CUDA graphs of the VITS stages over bucketed shapes: one replay instead of hundreds of kernel launches.

On an H200 the model is launch-bound (about 25 ms whatever the text length), so most of a request's time is
the CPU queueing small kernels. The two host-sync-free stages (``VitsModel.encode``: text encoder, duration
predictor and the duration rounding; ``VitsModel.decode``: flow and HiFi-GAN) are each captured once per
bucket of (rows, length) and replayed with the inputs copied into the bucket's static buffers, padded with
masked rows and positions (the masks make padding invisible, as in any padded batch; noise is drawn outside at
each row's own length). A bucket is captured on its first use, timed against the eager stage on the same
inputs (the two in turn, ``cuda_graphs.timed_in_turn``), and **kept only if its replay is faster**; every
bucket's sizes, time and memory are reported (the panel shows them). All graphs share one memory pool (they never
run at the same time). The pool is bounded by
``max_bytes``: a bucket is not captured when the pool's growth per padded element seen so far in its stage predicts
it would pass the bound (one 16-row decode bucket alone can take gigabytes, so checking only the pool's size before
each capture let it reach 5.8 GiB on the H200); such shapes, and those past the largest bucket, run eagerly.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from voicelab.backends.base import GraphBucket
from voicelab.backends.cuda_graphs import SideStream, bucket_for, capture, timed_in_turn, warm_up
from voicelab.backends.piper.model import VitsModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Buckets:
    """Padded sizes: rows per batch, phoneme ids per row (encode), frames per row (decode)."""

    rows: tuple[int, ...] = (1, 2, 4, 8, 16)
    tokens: tuple[int, ...] = (32, 64, 128, 256, 512)
    frames: tuple[int, ...] = (128, 256, 512, 1024, 2048, 4096)


@dataclass
class _Captured:
    """One bucket: its static inputs and outputs, and the graph (None where eager was as fast or capture failed)."""

    inputs: tuple[torch.Tensor, ...]
    outputs: tuple[torch.Tensor, ...]
    graph: torch.cuda.CUDAGraph | None
    report: GraphBucket


@dataclass
class VitsGraphs:
    """Wraps one ``VitsModel`` on one CUDA device; the model runs its stages through it (``model.graphs``, a
    ``StageGraphs``), the backend keeps it for capture, release and the reports."""

    model: VitsModel
    buckets: Buckets = field(default_factory=Buckets)
    max_bytes: int = 2 << 30
    _captured: dict[tuple[str, int, int], _Captured] = field(default_factory=dict)
    _pool: Any = None  # torch.cuda.graph_pool_handle(), shared by every bucket's graph
    _side: SideStream = field(default_factory=SideStream)  # every bucket's warm-up and capture
    _pool_bytes: int = 0
    _unit_bytes: dict[str, float] = field(default_factory=dict)  # per stage: most pool growth per rows x length
    _broken: bool = False
    _reports: list[GraphBucket] = field(default_factory=list)

    def release(self) -> int:
        """Drop every graph and its buffers so the pool's memory can be returned (``empty_cache`` after this).

        Private graph pools are not freed by ``empty_cache`` while their graphs live: Clean cache and the OOM
        retry call this first. Shapes are captured again on their next use (a capture that fails then leaves
        the stage eager). Returns the pool bytes released."""
        released = self._pool_bytes
        self._captured.clear()
        self._reports = []
        self._pool, self._pool_bytes = None, 0
        return released

    def fits(self, stage: str, rows: int, length: int) -> bool:
        """Whether capturing this bucket keeps the pool within ``max_bytes``, by the stage's growth so far."""
        predicted = self._unit_bytes.get(stage, 0.0) * rows * length
        return self._pool_bytes < self.max_bytes and self._pool_bytes + predicted <= self.max_bytes

    def reports(self) -> tuple[GraphBucket, ...]:
        """Every bucket captured so far (read from the heartbeat thread: a copy of a list, never the dict)."""
        return tuple(self._reports)

    def encode(
        self, ids: torch.Tensor, lengths: torch.Tensor, noise: torch.Tensor, length_scale: Sequence[float]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """``VitsModel.encode`` for ids [b, t] with per-row scales by the (b, t) bucket's graph; None: run eagerly.

        The outputs live in the graph's buffers: read them before the next replay (the model does at once).
        """
        b, t = ids.shape
        rows, tokens = bucket_for(self.buckets.rows, b), bucket_for(self.buckets.tokens, t)
        captured = self._get("encode", rows, tokens, lambda r, n: self._encode_inputs(r, n, ids.device))
        if captured is None or captured.graph is None:
            return None
        s_ids, s_lengths, s_noise, s_scale = captured.inputs
        s_ids.zero_()
        s_ids[:b, :t].copy_(ids)
        s_lengths.fill_(1)
        s_lengths[:b].copy_(lengths)
        s_noise.zero_()
        s_noise[:b, :, :t].copy_(noise)
        s_scale.fill_(1.0)
        s_scale[:b].copy_(torch.tensor(list(length_scale), dtype=torch.float32), non_blocking=True)
        captured.graph.replay()
        durations, m_p, logs_p = captured.outputs
        return durations[:b, :t], m_p[:b, :, :t], logs_p[:b, :, :t]

    def decode(self, z_p: torch.Tensor, frame_lengths: torch.Tensor) -> torch.Tensor | None:
        """``VitsModel.decode`` for z_p [b, C, T_y] by the (b, T_y) bucket's graph; None: run eagerly."""
        b, _, t_y = z_p.shape
        rows, frames = bucket_for(self.buckets.rows, b), bucket_for(self.buckets.frames, t_y)
        captured = self._get("decode", rows, frames, lambda r, n: self._decode_inputs(r, n, z_p))
        if captured is None or captured.graph is None:
            return None
        s_z, s_lengths = captured.inputs
        s_z.zero_()
        s_z[:b, :, :t_y].copy_(z_p)
        s_lengths.fill_(1)
        s_lengths[:b].copy_(frame_lengths)
        captured.graph.replay()
        return captured.outputs[0][:b, :, : t_y * self.model.dims.hop_length]

    def capture_all(self, max_rows_x_tokens: int, frames_per_token: int = 8, max_seconds: float = 60.0) -> int:
        """Capture (and time) every bucket a batch within the padded budget can reach, smallest first.

        Done at load, so graph memory is all taken before the first request: allocated memory does not grow
        later as new shapes come. Stops at the memory budget or after ``max_seconds`` (later shapes are then
        captured on first use). Returns how many buckets were captured.
        """
        started, device = time.monotonic(), next(self.model.parameters()).device
        dtype = self.model.dec.conv_pre.weight.dtype
        like = torch.zeros(1, self.model.dims.inter_channels, 1, dtype=dtype, device=device)
        wanted = [
            ("encode", r, n) for r in self.buckets.rows for n in self.buckets.tokens if r * n <= 2 * max_rows_x_tokens
        ]
        frames_budget = 2 * max_rows_x_tokens * frames_per_token
        wanted += [("decode", r, n) for r in self.buckets.rows for n in self.buckets.frames if r * n <= frames_budget]
        for stage, rows, length in sorted(wanted, key=lambda w: w[1] * w[2]):
            if self._broken or self._pool_bytes >= self.max_bytes or time.monotonic() - started > max_seconds:
                break
            if not self.fits(stage, rows, length):
                continue
            if stage == "encode":
                self._get(stage, rows, length, lambda r, n: self._encode_inputs(r, n, device))
            else:
                self._get(stage, rows, length, lambda r, n: self._decode_inputs(r, n, like))
        return len(self._captured)

    # ---- capture ----

    def _encode_inputs(self, rows: int, tokens: int, device: torch.device) -> tuple[torch.Tensor, ...]:
        return (
            torch.zeros(rows, tokens, dtype=torch.long, device=device),
            torch.ones(rows, dtype=torch.long, device=device),
            torch.zeros(rows, 2, tokens, device=device),
            torch.ones(rows, device=device),
        )

    def _decode_inputs(self, rows: int, frames: int, like: torch.Tensor) -> tuple[torch.Tensor, ...]:
        channels = like.shape[1]
        z = torch.zeros(rows, channels, frames, dtype=like.dtype, device=like.device)
        return z, torch.full((rows,), frames, dtype=torch.long, device=like.device)

    def _stage(self, stage: str) -> Callable[..., tuple[torch.Tensor, ...]]:
        model = self.model

        def encode(
            ids: torch.Tensor, lengths: torch.Tensor, noise: torch.Tensor, scale: torch.Tensor
        ) -> tuple[torch.Tensor, ...]:
            mask = (torch.arange(ids.shape[1], device=ids.device) < lengths.unsqueeze(1)).unsqueeze(1).float()
            return model.encode(ids, mask, noise, scale)

        def decode(z: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, ...]:
            mask = (torch.arange(z.shape[-1], device=z.device) < lengths.unsqueeze(1)).unsqueeze(1).to(z.dtype)
            return (model.decode(z, mask, ragged=True),)

        return encode if stage == "encode" else decode

    def _get(
        self, stage: str, rows: int | None, length: int | None, make: Callable[[int, int], tuple[torch.Tensor, ...]]
    ) -> _Captured | None:
        if rows is None or length is None or self._broken:
            return None
        key = (stage, rows, length)
        if key not in self._captured:
            if not self.fits(stage, rows, length):
                return None
            try:
                self._captured[key] = self._capture(stage, rows, length, make(rows, length))
                self._reports.append(self._captured[key].report)
            except (RuntimeError, torch.cuda.OutOfMemoryError):
                log.warning("CUDA graph capture of %s failed; running eagerly from now on", key, exc_info=True)
                self._broken = True
                return None
        return self._captured[key]

    def _capture(self, stage: str, rows: int, length: int, inputs: tuple[torch.Tensor, ...]) -> _Captured:
        """Warm up on a side stream, time eager, capture, time replays; keep the graph only if it is faster."""
        call = functools.partial(self._stage(stage), *inputs)
        warm_up(call, self._side, times=2)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        before = torch.cuda.memory_reserved()
        graph, outputs = capture(call, self._pool, self._side)
        grown = max(torch.cuda.memory_reserved() - before, 0)
        self._pool_bytes += grown
        self._unit_bytes[stage] = max(self._unit_bytes.get(stage, 0.0), grown / (rows * length))
        eager_ms, graph_ms = timed_in_turn(call, graph.replay)
        kept = graph_ms < eager_ms
        report = GraphBucket(stage, rows, length, grown, eager_ms, graph_ms, kept)
        log.info(
            "CUDA graph %s rows=%d length=%d: eager %.2f ms, graph %.2f ms", stage, rows, length, eager_ms, graph_ms
        )
        if not kept:  # drop the graph and its buffers: this shape runs eagerly, the pool reuses the memory
            return _Captured((), (), None, report)
        return _Captured(inputs, tuple(outputs), graph, report)
