"""The speech-token LLM's decode step with fixed inputs and outputs, replayed from CUDA graphs on CUDA.

A step reads each slot's last token and position from two small device tensors, runs the static-cache Qwen
body and upstream's ``llm_decoder``, and leaves log-probabilities in a fixed (slots, vocabulary) tensor. On CUDA
one graph per (row bucket, length bucket) is captured when the runner is built (one memory pool shared by all of
them): a step runs over the shortest length bucket that holds every slot in use (and, if asked, only the first
1, 2, 4, ... slots) and costs one graph launch instead of hundreds of kernel launches from Python. Elsewhere the
same code runs eagerly (the CPU fallback, and what the tests compare).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F

from voicelab.backends.base import GraphBucket
from voicelab.backends.cosyvoice.kv_cache import StaticKvCache, fit
from voicelab.backends.cosyvoice.static_qwen import StaticQwen
from voicelab.backends.cuda_graphs import device_ms

log = logging.getLogger(__name__)


class StepRunner:
    """``llm`` is upstream's ``Qwen2LM``/``CosyVoice3LM``; ``graphs`` turns capture on (CUDA only).

    shrink_rows: run only the first 1, 2, 4, ... slots that hold requests. Off, every step has the same shapes,
    so each request's numbers are bitwise the same whoever shares the step (a batch equals each run alone);
    on, a lone request in a large cache does less work, at the price of other kernels for other row counts.
    kernels: "torch" or "triton" (``StaticQwen``)."""

    def __init__(
        self, llm: Any, cache: StaticKvCache, graphs: bool, shrink_rows: bool = False, kernels: str = "torch"
    ) -> None:
        self.llm, self.cache = llm, cache
        self.row_buckets = cache.row_buckets(shrink_rows)
        self.qwen = StaticQwen(llm.llm.model.model, cache, kernels)
        device = cache.keys.device
        vocabulary = int(llm.llm_decoder.out_features)
        self.tokens = torch.zeros(cache.slots, dtype=torch.long, device=device)
        self.positions = torch.zeros(cache.slots, dtype=torch.long, device=device)
        self.logp = torch.zeros(cache.slots, vocabulary, dtype=cache.keys.dtype, device=device)
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}  # (rows, length bucket) -> graph
        self.reports: list[GraphBucket] = []  # one per graph, for the panel: its memory, warm-up (eager) and replay ms
        if graphs and device.type == "cuda":
            try:
                self._capture_all()
            except RuntimeError as exc:  # e.g. a kernel that cannot be captured: keep the same steps, eagerly
                self.graphs.clear()
                self.reports.clear()
                torch.cuda.synchronize()
                log.warning("CUDA graph capture failed, decoding eagerly on the static cache: %s", exc)

    @property
    def captured(self) -> bool:
        return bool(self.graphs)

    def prefill(self, embeds: torch.Tensor, slot: int) -> torch.Tensor:
        """A prompt into ``slot``; the log-probabilities of its next token, (vocabulary,)."""
        hidden = self.qwen.prefill(embeds, slot)
        return self.llm.llm_decoder(hidden).log_softmax(dim=-1)[0]

    def _eager(self, rows: int, length: int) -> None:
        embeds = F.embedding(self.tokens[:rows], self.llm.speech_embedding.weight).unsqueeze(1)
        hidden = self.qwen.step(embeds, self.positions[:rows], length)
        self.logp[:rows].copy_(self.llm.llm_decoder(hidden).log_softmax(dim=-1))

    def step(self, longest: int, slots: int = 1) -> torch.Tensor:
        """Advance slots 0..slots-1 by one token (``tokens``/``positions`` set by the caller); ``longest`` is
        the largest position + 1 among them. Returns ``logp`` (its first ``slots`` rows are this step's; all are
        overwritten by the next step). Rows and length are rounded up to their buckets."""
        rows, bucket = fit(self.row_buckets, slots, "slots"), self.cache.bucket(longest)
        graph = self.graphs.get((rows, bucket))
        if graph is not None:
            graph.replay()
        else:
            self._eager(rows, bucket)
        return self.logp

    @torch.inference_mode()
    def _capture_all(self) -> None:
        """Capture one graph per bucket. The warm-up and capture write slot positions 0 (token 0), which any
        request's prefill overwrites before reading."""
        self.tokens.zero_()
        self.positions.zero_()
        shapes = [(rows, length) for rows in self.row_buckets for length in self.cache.buckets]
        side = torch.cuda.Stream(device=self.cache.keys.device)
        side.wait_stream(torch.cuda.current_stream())
        events = {
            shape: (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for shape in shapes
        }
        with torch.cuda.stream(side):
            for shape in shapes:  # warm-up: kernels chosen, workspaces allocated outside the graphs; timed as eager
                events[shape][0].record()
                self._eager(*shape)
                events[shape][1].record()
        torch.cuda.current_stream().wait_stream(side)
        pool, added = None, {}
        for shape in shapes:
            allocated = torch.cuda.memory_allocated()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self._eager(*shape)
            pool = graph.pool()
            self.graphs[shape] = graph
            added[shape] = torch.cuda.memory_allocated() - allocated  # the shared pool: most in the first
        torch.cuda.synchronize()
        for (rows, length), graph in self.graphs.items():  # all kept (timed for the panel): one launch per token
            eager_ms = events[rows, length][0].elapsed_time(events[rows, length][1])  # its warm-up call
            self.reports.append(GraphBucket("llm step", rows, length, added[rows, length], eager_ms,
                                            device_ms(graph.replay), kept=True))  # fmt: skip
        log.info("captured %d decode-step graphs (rows %s x lengths %s)", len(shapes), self.row_buckets,
                 self.cache.buckets)  # fmt: skip
