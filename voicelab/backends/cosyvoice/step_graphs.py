"""The speech-token LLM's decode step with fixed inputs and outputs, replayed from CUDA graphs on CUDA.

A step reads each slot's last token and position from two small device tensors, runs the static-cache Qwen
body and upstream's ``llm_decoder``, and leaves log-probabilities in a fixed (slots, vocabulary) tensor. On CUDA
one graph per length bucket is captured when the runner is built (one memory pool shared by all of them), so a
token costs one graph launch instead of hundreds of kernel launches from Python; elsewhere the same code runs
eagerly (the CPU fallback, and what the tests compare).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F

from voicelab.backends.cosyvoice.kv_cache import StaticKvCache
from voicelab.backends.cosyvoice.static_qwen import StaticQwen

log = logging.getLogger(__name__)


class StepRunner:
    """``llm`` is upstream's ``Qwen2LM``/``CosyVoice3LM``; ``graphs`` turns capture on (CUDA only)."""

    def __init__(self, llm: Any, cache: StaticKvCache, graphs: bool) -> None:
        self.llm, self.cache = llm, cache
        self.qwen = StaticQwen(llm.llm.model.model, cache)
        device = cache.keys.device
        vocabulary = int(llm.llm_decoder.out_features)
        self.tokens = torch.zeros(cache.slots, dtype=torch.long, device=device)
        self.positions = torch.zeros(cache.slots, dtype=torch.long, device=device)
        self.logp = torch.zeros(cache.slots, vocabulary, dtype=cache.keys.dtype, device=device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        if graphs and device.type == "cuda":
            try:
                self._capture_all()
            except RuntimeError as exc:  # e.g. a kernel that cannot be captured: keep the same steps, eagerly
                self.graphs.clear()
                torch.cuda.synchronize()
                log.warning("CUDA graph capture failed, decoding eagerly on the static cache: %s", exc)

    @property
    def captured(self) -> bool:
        return bool(self.graphs)

    def prefill(self, embeds: torch.Tensor, slot: int) -> torch.Tensor:
        """A prompt into ``slot``; the log-probabilities of its next token, (vocabulary,)."""
        hidden = self.qwen.prefill(embeds, slot)
        return self.llm.llm_decoder(hidden).log_softmax(dim=-1)[0]

    def _eager(self, length: int) -> None:
        embeds = F.embedding(self.tokens, self.llm.speech_embedding.weight).unsqueeze(1)
        hidden = self.qwen.step(embeds, self.positions, length)
        self.logp.copy_(self.llm.llm_decoder(hidden).log_softmax(dim=-1))

    def step(self, longest: int) -> torch.Tensor:
        """Advance every slot by one token (``tokens``/``positions`` set by the caller); ``longest`` is the
        largest position + 1 among the slots in use. Returns ``logp`` (overwritten by the next step)."""
        bucket = self.cache.bucket(longest)
        graph = self.graphs.get(bucket)
        if graph is not None:
            graph.replay()
        else:
            self._eager(bucket)
        return self.logp

    @torch.inference_mode()
    def _capture_all(self) -> None:
        """Capture one graph per bucket. The warm-up and capture write slot positions 0 (token 0), which any
        request's prefill overwrites before reading."""
        self.tokens.zero_()
        self.positions.zero_()
        side = torch.cuda.Stream(device=self.cache.keys.device)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for bucket in self.cache.buckets:
                self._eager(bucket)  # warm-up: kernels chosen, workspaces allocated outside the graphs
        torch.cuda.current_stream().wait_stream(side)
        pool = None
        for bucket in self.cache.buckets:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self._eager(bucket)
            pool = graph.pool()
            self.graphs[bucket] = graph
        torch.cuda.synchronize()
        log.info("captured %d decode-step graphs (buckets %s)", len(self.graphs), self.cache.buckets)
