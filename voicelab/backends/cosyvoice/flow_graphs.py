"""CUDA graphs of CosyVoice's flow estimator over length buckets, kept only where measured faster and equal.

The flow decoder calls its estimator once per Euler step (10 per request, classifier-free guidance as a batch of 2),
and each call is hundreds of small kernels; on the H200 the flow took 41 % of a CosyVoice2 request (2026-12-01
profile). ``GraphedEstimator`` stands in for ``flow.decoder.estimator`` (upstream's classes are untouched): a call
is padded at the end to the smallest bucket holding its length, copied into the bucket's static buffers and
replayed. Padding at the end does not change the frames before it (causal, masked convolutions; attention over
masked keys): on the CPU, CosyVoice2's estimator gave the same frames within 5e-6 for lengths 137, 300 and 611
padded to 256, 512 and 768. Every bucket is captured at load (``capture_all``); a shorter call replayed padded into
it is compared with that call run eagerly (a bucket whose replay differs, as a non-causal estimator's would, is
never used), and the bucket is kept only if its replay is faster. Never during requests: while any thread captures,
a random draw on the default CUDA generator in another thread (the vocoder's noise) raises, so after a release
(Clean cache, the OOM retry) the backend captures again only when no request is running. Upstream's
``add_optional_chunk_mask`` ends with a ``.item()`` check, a host sync no capture can hold: while capturing, the
estimator's module sees an equivalent without it. Streamed calls (upstream's chunk masks: each frame sees its own
50-frame chunk and the ones before it) get their own graphs per bucket: a chunk mask depends only on the length, and
padding at the end only adds masked keys and later frames, so the frames before it are unchanged there too. They
matter most for the first audio, whose ten Euler steps ran eagerly at ~40 ms each on the H200. One lock: requests
side by side take turns at the estimator (their kernels share the device anyway), each copying its output out before
the next replay. All buckets share one memory pool. Calls under autocast (upstream's float16 mode) and lengths past
the largest bucket run eagerly.

TF32 (``tf32``, the backend option ``flow_tf32``, on by default): the graphs are captured with float32 matmuls on
the tensor cores in TF32, as cuDNN already runs this estimator's convolutions by default; the choice is baked into
the captured kernels, so no global setting changes while requests run (other threads' eager matmuls, the LLM's
prefill, stay full float32). On the H200 a replay took 7.1 instead of 10.3 ms at 256 frames and 19.9 instead of
26.0 at 1,024, its frames within 1.5e-3 of the float32 call's scale (bfloat16 weights: 4.8 ms but 0.1-0.2 off;
``torch.compile`` under the graph: 6.2 ms after an 88 s compile at every load; neither taken). The equality check
at capture compares against the eager call in the same precision: it proves the capture and the padding.

float16 (``half``, the backend option ``flow_half``, on by default): the estimator's weights are cast to float16
once and every call, graphed or eager, runs in float16 with its inputs cast in and its output cast back, as
upstream's own fp16 mode runs the flow and NVIDIA's TensorRT flow does. On the CPU a small random estimator's
output stayed within 2.1e-2 of float32's scale in float16 (bfloat16: 0.25), ``tests/test_cosyvoice_flow_graphs.py``
(its GPU test: within 3e-2 on an H100). On an H100 (2026-12-05, side by side) the anchor's RTF went from 0.088 to
0.072 and its p50 from 0.732 to 0.598 s, with 264 MiB less reserved.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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

log = logging.getLogger(__name__)

# Mel frames (50 per second, prompt included). On the H200 (CosyVoice2, float32) eager took ~40 ms per call up to
# 1,024 frames (launch-bound) and the graphs 10-25 ms. At 1,536 frames the graph took 33 ms against 40 eager, and a
# request past 1,024 frames (a 13 s prompt and 10 s of speech: 1,152) ran its ten eager calls in ~750 ms, each new
# length costing more than its arithmetic; padded into the 1,536 graph, ~360 ms. At 2,048 graph and eager were
# within 5 % (59/62 ms) and the bucket cost ~0.9 GiB reserved: longer calls run eagerly (2026-12-04).
FRAME_BUCKETS = (256, 512, 768, 1024, 1536)
# Largest difference from eager, relative to the output's scale. Padded to its bucket a call runs other convolution
# algorithms, in TF32 (cuDNN's default): 1.4e-3 on the H200; padding that leaked into the frames differs by far more.
TOLERANCE = 5e-3


@dataclass
class _Bucket:
    inputs: tuple[torch.Tensor, ...]  # x, mask, mu, t, spks, cond, padded to the bucket
    output: torch.Tensor
    graph: torch.cuda.CUDAGraph


class GraphedEstimator(torch.nn.Module):
    """``estimator`` (upstream's ``CausalConditionalDecoder`` or DiT) behind bucketed CUDA graphs on CUDA."""

    def __init__(
        self,
        estimator: torch.nn.Module,
        buckets: tuple[int, ...] = FRAME_BUCKETS,
        tf32: bool = True,
        half: bool = False,
    ) -> None:
        super().__init__()
        self.estimator = estimator.half() if half else estimator
        self.buckets = buckets
        self.tf32 = tf32  # graphs captured with TF32 matmuls
        self.float16 = half  # weights and every call in float16 (``half`` would hide nn.Module.half)
        self.captured: dict[tuple[int, bool], _Bucket | None] = {}  # (frames, streamed); None: runs eagerly
        self.reports: list[GraphBucket] = []
        self.lock = threading.Lock()
        self.pool: Any = None
        self.side = SideStream()  # every bucket's warm-up and capture
        self.released = False  # graphs dropped by ``release``: ``capture_all`` again when no request runs

    def __getattr__(self, name: str) -> Any:  # upstream reads e.g. ``static_chunk_size`` off its estimator
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("estimator"), name)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, mu: torch.Tensor, t: torch.Tensor,
                spks: torch.Tensor | None = None, cond: torch.Tensor | None = None,
                streaming: bool = False) -> torch.Tensor:  # fmt: skip
        inputs = (x, mask, mu, t, spks, cond)
        frames, given = int(x.shape[2]), x.dtype
        bucket = bucket_for(self.buckets, frames)
        autocast = torch.is_autocast_enabled("cuda")  # its weight cache must not be captured (float16 mode)
        if autocast or not x.is_cuda or spks is None or cond is None or bucket is None:
            return self._eager(inputs, streaming).to(given)
        with self.lock:
            entry = self.captured.get((bucket, streaming))
            if entry is not None:
                _load(entry, inputs)  # type: ignore[arg-type]
                entry.graph.replay()
                return entry.output[:, :, :frames].to(given, copy=True)
        return self._eager(inputs, streaming).to(given)  # a bucket whose graph was not faster (or released)

    def _eager(self, inputs: tuple[torch.Tensor | None, ...], streaming: bool) -> torch.Tensor:
        """The estimator itself, its floating inputs cast to float16 where ``half``."""
        if self.float16:
            inputs = tuple(v.half() if v is not None and v.is_floating_point() else v for v in inputs)
        return self.estimator(*inputs, streaming=streaming)

    @property
    def modes(self) -> tuple[bool, ...]:
        """Whole calls, and streamed ones where the estimator has chunks (without, streaming changes nothing)."""
        return (False, True) if int(getattr(self.estimator, "static_chunk_size", 0) or 0) > 0 else (False,)

    def capture_all(self, channels: int = 80) -> int:
        """Capture every bucket, whole and streamed, on synthetic inputs (at load, or when no request runs); the
        number kept."""
        weight = next(self.estimator.parameters())
        device, dtype = weight.device, weight.dtype
        generator = torch.Generator(device=device).manual_seed(0)
        with self.lock, torch.inference_mode(), _capturable_masks(self.estimator), matmul_tf32(self.tf32):
            self.captured.clear()
            self.reports.clear()
            for streaming in self.modes:
                for bucket in self.buckets:
                    shape = (2, channels, bucket)
                    x, mu, cond = (torch.randn(*shape, device=device, generator=generator).to(dtype) for _ in range(3))
                    spks = torch.randn(2, channels, device=device, generator=generator).to(dtype)
                    t = torch.rand(2, device=device, generator=generator).to(dtype)
                    mask = torch.ones(2, 1, bucket, device=device, dtype=dtype)
                    self.captured[bucket, streaming] = self._capture(bucket, (x, mask, mu, t, spks, cond), streaming)
            self.released = False
        return sum(1 for entry in self.captured.values() if entry is not None)

    def release(self) -> int:
        """Drop every captured graph (their pool becomes freeable) until the next ``capture_all``."""
        with self.lock:
            dropped = sum(1 for entry in self.captured.values() if entry is not None)
            self.captured.clear()
            self.reports.clear()
            self.pool = None
            self.released = True
        return dropped

    def _capture(self, bucket: int, static: tuple[torch.Tensor, ...], streaming: bool) -> _Bucket | None:
        """``static``: the bucket's own inputs, of its length, kept as the graph's input buffers."""
        allocated = torch.cuda.memory_allocated()
        eager = lambda: self.estimator(*static, streaming=streaming)  # noqa: E731
        stage = "flow estimator, streamed" if streaming else "flow estimator"
        try:
            eager()
            warm_up(eager, self.side)
            graph, output = capture(eager, self.pool, self.side)
            self.pool = graph.pool()
        except RuntimeError as exc:  # a kernel that cannot be captured: this bucket stays eager
            log.warning("%s graph for %d frames not captured: %s", stage, bucket, exc)
            restore_generator_after_failed_capture()
            return None
        entry = _Bucket(static, output, graph)
        equal = self._same_as_eager(entry, streaming)
        eager_ms, graph_ms = device_ms(eager), device_ms(graph.replay)
        kept = equal and graph_ms < eager_ms
        added = torch.cuda.memory_allocated() - allocated
        self.reports.append(GraphBucket(stage, 2, bucket, added, eager_ms, graph_ms, kept))
        verdict = "kept" if kept else "eager" if equal else "REJECTED: differs from eager"
        precision = "float16" if self.float16 else "TF32" if self.tf32 else "float32"
        log.info("%s graph, %d frames, %s: eager %.2f ms, graph %.2f ms, %s", stage, bucket, precision, eager_ms,
                 graph_ms, verdict)  # fmt: skip
        return entry if kept else None

    def _same_as_eager(self, entry: _Bucket, streaming: bool) -> bool:
        """A call of three quarters of the bucket, replayed padded into it, against that call run eagerly: equal
        frames prove the capture and that padding at the end leaves the frames before it alone (a non-causal
        estimator, e.g. one with a centred convolution, fails here and keeps running eagerly)."""
        frames = int(entry.inputs[0].shape[2]) * 3 // 4
        short = tuple(v[:, :, :frames].clone() if v.dim() == 3 else v.clone() for v in entry.inputs)
        reference = self.estimator(*short, streaming=streaming)
        _load(entry, short)
        entry.graph.replay()
        scale = float(reference.abs().max()) or 1.0
        return float((entry.output[:, :, :frames] - reference).abs().max()) <= TOLERANCE * scale


@contextlib.contextmanager
def matmul_tf32(enabled: bool) -> Iterator[None]:
    """float32 matmuls in TF32 (``enabled``) or full float32 inside the block; the process's setting after it.
    Only around captures: the flag is global, and a captured graph keeps the kernels chosen while capturing."""
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


@contextlib.contextmanager
def _capturable_masks(estimator: torch.nn.Module) -> Iterator[None]:
    """While capturing: the estimator's module gets an ``add_optional_chunk_mask`` without upstream's host sync.
    Upstream returns the padding mask (whole calls) or the padding mask and the static chunk mask (streamed: key
    ``j`` visible to frame ``i`` when ``j`` lies in ``i``'s chunk or before it), with all-false rows set true
    after a ``.item()`` test; ``mask | (no true in the row)`` is the same tensor, computed on the device. Dynamic
    chunks (training) and a left-chunk limit are left to upstream."""
    module = sys.modules.get(type(estimator).__module__)
    original: Callable[..., torch.Tensor] | None = getattr(module, "add_optional_chunk_mask", None)
    if module is None or original is None:
        yield
        return

    def sync_free(xs: torch.Tensor, masks: torch.Tensor, dynamic: bool, dynamic_left: bool, decoding_chunk: int,
                  static_chunk: int, *rest: Any, **named: Any) -> torch.Tensor:  # fmt: skip
        left = rest[0] if rest else named.get("num_decoding_left_chunks", -1)
        if dynamic or (static_chunk > 0 and left >= 0):
            return original(xs, masks, dynamic, dynamic_left, decoding_chunk, static_chunk, *rest, **named)
        if static_chunk > 0:
            masks = masks & _chunk_mask(int(xs.size(1)), static_chunk, masks.device).unsqueeze(0)
        return masks | (masks.sum(dim=-1, keepdim=True) == 0)

    setattr(module, "add_optional_chunk_mask", sync_free)  # noqa: B010
    try:
        yield
    finally:
        setattr(module, "add_optional_chunk_mask", original)  # noqa: B010


def _chunk_mask(length: int, chunk: int, device: torch.device) -> torch.Tensor:
    """(length, length): frame ``i`` sees every frame before the end of its own ``chunk``-frame chunk."""
    position = torch.arange(length, device=device)
    chunk_end = (position // chunk + 1) * chunk
    return position.unsqueeze(0) < chunk_end.unsqueeze(1)


def _load(entry: _Bucket, inputs: tuple[torch.Tensor, ...]) -> None:
    for static, value in zip(entry.inputs, inputs, strict=True):
        if value.dim() < 3:
            static.copy_(value)
        else:
            static.zero_()
            static[:, :, : value.shape[2]].copy_(value)


def install_flow_graphs(flow: Any, tf32: bool = True, half: bool = False) -> GraphedEstimator | None:
    """Put this flow model's estimator behind ``GraphedEstimator`` (CUDA only; None elsewhere), its graphs in TF32
    where ``tf32``, the estimator in float16 where ``half``."""
    decoder: Any = getattr(flow, "decoder", None)
    estimator = getattr(decoder, "estimator", None)
    if decoder is None or not isinstance(estimator, torch.nn.Module) or not torch.cuda.is_available():
        return None
    device = next(estimator.parameters()).device
    if device.type != "cuda":
        return None
    graphed = GraphedEstimator(estimator, tf32=tf32, half=half)
    decoder.estimator = graphed
    kept = graphed.capture_all(int(getattr(flow, "output_size", 80)))
    torch.cuda.empty_cache()  # the eager warm-ups' blocks: at load nothing else holds the allocator's cache
    log.info("flow estimator: %d of %d graphs kept (length buckets x whole/streamed)", kept,
             len(graphed.buckets) * len(graphed.modes))  # fmt: skip
    return graphed
