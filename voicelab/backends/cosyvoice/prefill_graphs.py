"""The speech-token LLM's prefill (a whole prompt into a cache slot) replayed from CUDA graphs per length bucket.

A request's first token waits for its prompt (text, the voice's transcript and speech tokens: a few hundred
positions) to run through the 24-layer body. Eagerly that is hundreds of kernel launches from Python, each
waiting on the host, for little arithmetic; it sits in every request's latency and in all of its first audio.
Here the prompt is copied into a static buffer, padded at the end to the smallest bucket that holds it, and one
graph runs the body (``StaticQwen.run_prompt``), the final norm and ``llm_decoder`` at the prompt's last position
(its index a device tensor, so one graph serves every length in its bucket). Each layer's keys and values land in
a staging buffer, and two copies move the prompt's own positions into the request's slot: a graph cannot know the
slot, and one graph per slot and bucket would multiply the captures by the slot count. The padded positions'
keys never reach the slot.

Padding at the end leaves the prompt's positions as they were (causal attention, position-wise layers), so a
bucket is kept only where its replay of a prompt of three quarters of its length matches that prompt prefilled
eagerly (log-probabilities within ``step_choice.TOLERANCE``, the kernels seeing other shapes) and is faster. Longer
prompts, and every prompt off CUDA, run eagerly.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from voicelab.backends.base import GraphBucket
from voicelab.backends.cosyvoice.kv_cache import StaticKvCache
from voicelab.backends.cosyvoice.static_qwen import StaticQwen
from voicelab.backends.cosyvoice.step_choice import TOLERANCE
from voicelab.backends.cuda_graphs import SideStream, bucket_for, capture, device_ms, warm_up

log = logging.getLogger(__name__)

# Prompt positions. A zero-shot prompt is its transcript and the target text as text tokens plus 25 speech tokens a
# second of the voice: ~150-450 positions for 5-15 s prompts. Steps of 64 keep the padding's arithmetic small.
PREFILL_BUCKETS = (64, 128, 192, 256, 320, 384, 448, 512, 640, 768, 1024)
STAGE = "llm prefill"

Head = Callable[[torch.Tensor], torch.Tensor]  # (rows, hidden) after the final norm -> (rows, vocabulary) log-probs


@dataclass(frozen=True)
class _Staging:
    """The graphs' fixed inputs and outputs: the prompt, its last index, each layer's keys and values, the
    log-probabilities of the first token."""

    embeds: torch.Tensor  # (1, largest bucket, hidden)
    last: torch.Tensor  # (1,) long
    keys: torch.Tensor  # (layers, kv_heads, largest bucket, head_dim)
    values: torch.Tensor
    logp: torch.Tensor  # (vocabulary,)

    @classmethod
    def of(cls, cache: StaticKvCache, longest: int, vocabulary: int) -> _Staging:
        shape, dtype, device = cache.shape, cache.keys.dtype, cache.keys.device
        kv = (shape.layers, shape.kv_heads, longest, shape.head_dim)
        return cls(
            embeds=torch.zeros(1, longest, shape.hidden, dtype=dtype, device=device),
            last=torch.zeros(1, dtype=torch.long, device=device),
            keys=torch.zeros(kv, dtype=dtype, device=device),
            values=torch.zeros(kv, dtype=dtype, device=device),
            logp=torch.zeros(vocabulary, dtype=dtype, device=device),
        )


class PrefillGraphs:
    """``qwen``'s prefill into ``cache`` through captured buckets; ``head`` maps the normed last position to
    log-probabilities. ``graphs``: capture (CUDA only); without, ``prefill`` runs the padded path eagerly (what the
    CPU tests compare with the plain prefill)."""

    def __init__(self, qwen: StaticQwen, cache: StaticKvCache, head: Head, vocabulary: int, graphs: bool,
                 buckets: tuple[int, ...] = PREFILL_BUCKETS) -> None:  # fmt: skip
        self.qwen, self.cache, self.head = qwen, cache, head
        self.buckets = tuple(b for b in buckets if b <= cache.capacity)
        self.staging = _Staging.of(cache, self.buckets[-1] if self.buckets else 0, vocabulary)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.reports: list[GraphBucket] = []
        self.side = SideStream()  # every bucket's warm-up and capture
        self.lock = threading.Lock()  # one set of buffers: prefills take turns (each decoder prefills on one stream)
        self.eager_padded = not graphs
        if graphs and cache.keys.is_cuda:
            self._capture_all()

    def prefill(self, embeds: torch.Tensor, slot: int) -> torch.Tensor | None:
        """A (1, length, hidden) prompt into ``slot``: the first token's log-probabilities, (vocabulary,); None
        where no kept bucket holds it (the caller prefills eagerly)."""
        length = int(embeds.shape[1])
        bucket = bucket_for(self.buckets, length)
        if bucket is None or (bucket not in self.graphs and not self.eager_padded):
            return None
        with self.lock:
            self._load(embeds)
            graph = self.graphs.get(bucket)
            if graph is not None:
                graph.replay()
            else:
                self._run(bucket)
            self.cache.keys[:, slot, :, :length].copy_(self.staging.keys[:, :, :length])
            self.cache.values[:, slot, :, :length].copy_(self.staging.values[:, :, :length])
            return self.staging.logp.clone()

    def _load(self, embeds: torch.Tensor) -> None:
        length = int(embeds.shape[1])
        self.staging.embeds[:, :length].copy_(embeds)
        self.staging.last.fill_(length - 1)

    def _run(self, bucket: int) -> None:
        """The padded prefill of the staged prompt: what each bucket's graph holds."""
        staging = self.staging

        def write(index: int, key: torch.Tensor, value: torch.Tensor) -> None:
            staging.keys[index, :, :bucket].copy_(key)
            staging.values[index, :, :bucket].copy_(value)

        hidden = self.qwen.run_prompt(staging.embeds[:, :bucket], write)
        last = self.qwen.norm(hidden.index_select(1, staging.last)[:, 0])
        staging.logp.copy_(self.head(last)[0])

    @torch.inference_mode()
    def _capture_all(self) -> None:
        pool = None
        generator = torch.Generator(device=self.cache.keys.device).manual_seed(0)
        for bucket in self.buckets:
            self.staging.embeds.normal_(generator=generator)
            self.staging.last.fill_(bucket - 1)
            pool = self._capture(bucket, pool)
        self.cache.keys.zero_()
        self.cache.values.zero_()

    def _capture(self, bucket: int, pool: Any) -> Any:
        """Capture, check and time one bucket (kept only where equal and faster); the shared pool after it."""
        run = functools.partial(self._run, bucket)
        allocated = torch.cuda.memory_allocated()
        try:
            warm_up(run, self.side)
            graph, _ = capture(run, pool, self.side)
        except RuntimeError as exc:  # a kernel that cannot be captured: prompts of this bucket run eagerly
            log.warning("%s graph for %d positions not captured: %s", STAGE, bucket, exc)
            return pool
        difference = self._difference_from_eager(bucket, graph)
        equal = difference <= TOLERANCE[self.cache.keys.dtype]
        eager_ms, graph_ms = device_ms(run), device_ms(graph.replay)
        kept = equal and graph_ms < eager_ms
        if kept:
            self.graphs[bucket] = graph
        added = torch.cuda.memory_allocated() - allocated
        self.reports.append(GraphBucket(STAGE, 1, bucket, added, eager_ms, graph_ms, kept))
        log.info("%s graph, %d positions: eager %.2f ms, graph %.2f ms, %.2g from eager, %s", STAGE, bucket, eager_ms,
                 graph_ms, difference, "kept" if kept else "eager" if equal else "REJECTED")  # fmt: skip
        return graph.pool()

    def _difference_from_eager(self, bucket: int, graph: torch.cuda.CUDAGraph) -> float:
        """A prompt of three quarters of the bucket replayed padded into it, against the same prompt prefilled
        eagerly into slot 0: the larger of the log-probabilities' largest difference and the keys' (relative to
        their scale)."""
        length = max(1, bucket * 3 // 4)
        prompt = self.staging.embeds[:, :length].clone()
        expected = self.head(self.qwen.prefill(prompt, slot=0))[0]
        self._load(prompt)
        graph.replay()
        keys = self.cache.keys[:, 0, :, :length]
        keys_off = float((self.staging.keys[:, :, :length] - keys).abs().max() / keys.abs().max().clamp_min(1e-6))
        return max(keys_off, float((self.staging.logp - expected).abs().max()))
