"""The fast decode path for upstream's speech-token LLM: static KV cache, CUDA-graph steps, sampling on the device.

``install_fast_decode`` replaces one loaded model's ``llm.inference_wrapper`` (the token loop that upstream's
``inference`` drives) with ``FastDecoder.decode``, which keeps upstream's semantics: prefill the whole prompt
embedding, then per token the log-softmax of ``llm_decoder``, the end token masked while fewer than ``min_len``
tokens exist, upstream's ``ras_sampling`` (``sampling.py``, or from its distribution on the device,
``device_sampling.py``), stop at any stop id, at most ``max_len`` tokens, the
next input being the token's ``speech_embedding`` row. A request's ``max_len`` is cut to what the cache holds
(``kv_cache.decode_room``); one whose prompt leaves no room, or that arrives while another holds the decoder, runs
upstream's own loop instead, so nothing is ever refused.

``fix_step_mask`` repairs upstream's eager step under transformers 5: upstream passes a one-column attention mask
with each new token, which transformers 4 read as "no padding" but transformers 5 pads with zeros, so every decode
step attends to the first prompt position only. We pass a mask over every cached position instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from voicelab.backends.cosyvoice.device_sampling import Readback, SlotSampler
from voicelab.backends.cosyvoice.kv_cache import QwenShape, StaticKvCache, decode_room
from voicelab.backends.cosyvoice.sampling import TokenRules
from voicelab.backends.cosyvoice.step_graphs import StepRunner

log = logging.getLogger(__name__)
Wrapper = Callable[..., Iterator[int]]


@dataclass(frozen=True)
class FastDecodeConfig:
    """capacity: positions per request (prompt embedding + generated tokens; 4096 ≈ 2 min of speech after a
    long prompt). graphs: capture the step in CUDA graphs (ignored off CUDA). mask_stops: never emit a stop id
    (random-weight models, as ``upstream._mask_stop_tokens`` does for upstream's sampler). kernels: the step's
    layers from PyTorch's kernels or from ``fused_step``'s Triton ones (``StaticQwen``). sampling: "exact"
    (upstream's tokens from the default generator) or "device" (``SlotSampler``, as the batched decoder draws: its
    uniforms from a generator seeded off the default CPU one, so ``torch.manual_seed`` still fixes the tokens)."""

    capacity: int = 4096
    graphs: bool = True
    mask_stops: bool = False
    kernels: str = "torch"
    sampling: str = "exact"


class FastDecoder:
    """One request at a time over a one-slot static cache (``batch_decode`` runs several)."""

    def __init__(self, llm: Any, config: FastDecodeConfig) -> None:
        param = llm.llm_decoder.weight
        cache = StaticKvCache(QwenShape.of(llm.llm.model.config), 1, config.capacity, param.dtype, param.device)
        self.config = config
        self.rules = TokenRules.of(llm, config.mask_stops)
        self.runner = StepRunner(llm, cache, config.graphs, kernels=config.kernels)
        self.lock = threading.Lock()
        self.sampler = SlotSampler.beside(self.runner, self.rules, config.capacity) if (
            config.sampling == "device") else None  # fmt: skip
        self.readback = Readback(1, param.device)

    def room(self, lm_input: torch.Tensor, min_len: int, max_len: int) -> int | None:
        return decode_room(int(lm_input.shape[1]), min_len, max_len, self.config.capacity)

    def close(self) -> None:
        """Nothing to stop (no thread); the cache and graphs go with the last reference."""

    @torch.inference_mode()
    def decode(self, lm_input: torch.Tensor, min_len: int, max_len: int) -> Iterator[int]:
        """Upstream's ``inference_wrapper`` loop (the non-vLLM branch) on the static cache."""
        length = int(lm_input.shape[1])
        runner = self.runner
        logp = runner.prefill(lm_input.to(runner.logp.dtype), slot=0)
        if self.sampler is not None:
            yield from self._decode_on_device(self.sampler, logp, length, min_len, max_len)
            return
        decoded: list[int] = []
        for index in range(max_len):
            token = self.rules.sample(logp, decoded, min_len)
            if token in self.rules.stop_ids:
                return
            yield token
            decoded.append(token)
            runner.tokens.fill_(token)
            runner.positions.fill_(length + index)
            logp = runner.step(length + index + 1)[0]

    def _decode_on_device(
        self, sampler: SlotSampler, logp: torch.Tensor, length: int, min_len: int, max_len: int
    ) -> Iterator[int]:
        """The same loop with the token drawn on the device and the next step queued before the host reads it
        (``batch_decode``'s cycle for one slot); the step after the last token is queued for nothing."""
        runner = self.runner
        runner.logp[0].copy_(logp)
        seed = int(torch.randint(0, 2**62, (1,)).item())
        sampler.admit(0, torch.Generator(device=logp.device).manual_seed(seed), min_len, length)
        for index in range(max_len):
            self.readback.start(sampler.next_inputs(runner.logp[:1], runner.tokens, runner.positions))
            runner.step(length + index + 1)
            (token,) = self.readback.finish(1)
            if token in self.rules.stop_ids:
                return
            yield token


def install_fast_decode(llm: Any, config: FastDecodeConfig) -> FastDecoder:
    """Route this LLM instance's token loop through a ``FastDecoder`` (upstream's class is untouched)."""
    decoder = FastDecoder(llm, config)
    original: Wrapper = llm.inference_wrapper

    def inference_wrapper(
        lm_input: torch.Tensor, sampling: int, min_len: int, max_len: int, uuid: str
    ) -> Iterator[int]:
        room = decoder.room(lm_input, min_len, max_len)
        if hasattr(llm, "vllm") or room is None or not decoder.lock.acquire(blocking=False):
            yield from original(lm_input, sampling, min_len, max_len, uuid)
            return
        try:
            yield from decoder.decode(lm_input, min_len, room)
        finally:
            decoder.lock.release()

    llm.inference_wrapper = inference_wrapper
    log.info(
        "fast decode on %s: %s, cache %.1f MiB",
        llm.llm_decoder.weight.device,
        "CUDA graphs" if decoder.runner.captured else "eager static cache",
        decoder.runner.cache.nbytes / 2**20,
    )
    return decoder


def fix_step_mask(encoder: Any) -> None:
    """Give upstream's ``Qwen2Encoder.forward_one_step`` (this instance) a mask over all cached positions."""
    original: Callable[..., Any] = encoder.forward_one_step

    def forward_one_step(xs: torch.Tensor, masks: torch.Tensor, cache: Any = None) -> Any:
        past = int(cache.get_seq_length()) if cache is not None else 0
        full = torch.ones((xs.shape[0], 1, past + xs.shape[1]), dtype=torch.bool, device=xs.device)
        return original(xs, full, cache)

    encoder.forward_one_step = forward_one_step
