"""One request through upstream's model: its ``llm_job`` thread and ``token2wav`` as they are, its ``tts`` loop ours.

Upstream's ``CosyVoice2Model.tts`` (CosyVoice3 inherits it) looks for new speech tokens every 100 ms while
streaming, which adds up to 0.1 s to the first audio and to every chunk; it grows the hop length on the shared
model instance, so streams side by side step on each other's; and it ends every request with
``torch.cuda.empty_cache()`` and a device synchronisation, which, with requests side by side, stalls the others
and hands back the cached blocks they are about to ask for again (the engine's hygiene decides when to clean).
``speak`` keeps upstream's chunk rule exactly -- the first hop padded so that prompt and tokens fill whole hops,
then the hop multiplied up to its maximum, every chunk waiting for the flow's look-ahead tokens, the rest in one
final call -- with the hop length per request, and wakes on each token (``LlmWatch.progressed``) instead of polling.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from voicelab.backends.cosyvoice.request_watch import LlmWatch

log = logging.getLogger(__name__)
SESSION_DICTS = ("tts_speech_token_dict", "llm_end_dict", "hift_cache_dict")
STOP_WAIT_S = 60.0


@dataclass(frozen=True)
class Hops:
    """Upstream's streaming schedule, read from the loaded model: the first hop (tokens), its maximum, the factor
    it grows by after each chunk, and the flow's look-ahead tokens."""

    first: int
    most: int
    scale: float
    lookahead: int

    @classmethod
    def of(cls, model: Any) -> Hops:
        return cls(
            int(model.token_hop_len),
            int(model.token_max_hop_len),
            model.stream_scale_factor,
            int(model.flow.pre_lookahead_len),
        )

    def prompt_pad(self, prompt_tokens: int) -> int:
        """Tokens added to the first hop so that prompt and first chunk fill whole hops (as upstream pads)."""
        return math.ceil(prompt_tokens / self.first) * self.first - prompt_tokens


def _empty(*shape: int, dtype: torch.dtype = torch.int32) -> torch.Tensor:
    return torch.zeros(*shape, dtype=dtype)


def speak(
    model: Any, inputs: dict[str, torch.Tensor], watch: LlmWatch, hops: Hops, stream: bool, speed: float = 1.0
) -> Iterator[torch.Tensor]:
    """Upstream's audio for one request (``inputs``: ``tts``'s keyword arguments), chunk by chunk when ``stream``.
    However the caller leaves, the thread is stopped and the request's per-request entries are dropped."""
    key = watch.request_id
    with model.lock:
        model.tts_speech_token_dict[key], model.llm_end_dict[key], model.hift_cache_dict[key] = [], False, None
    prompt_text = inputs.get("prompt_text", _empty(1, 0))
    prompt_token = inputs.get("llm_prompt_speech_token", _empty(1, 0))
    embedding = inputs.get("llm_embedding", _empty(0, 192, dtype=torch.float32))
    args = (inputs["text"], prompt_text, prompt_token, embedding, key)
    job = threading.Thread(target=model.llm_job, args=args, name="cosyvoice-llm", daemon=True)
    job.start()
    finished = False
    try:
        if stream:
            yield from _streamed(model, inputs, watch, hops, job)
        else:
            job.join()
            watch.raise_if_failed()
            yield _token2wav(model, inputs, key, model.tts_speech_token_dict[key], 0, finalize=True, speed=speed)
        finished = True
    finally:
        _end(model, watch, job, finished)


def _streamed(
    model: Any, inputs: dict[str, torch.Tensor], watch: LlmWatch, hops: Hops, job: threading.Thread
) -> Iterator[torch.Tensor]:
    key = watch.request_id
    tokens: list[int] = model.tts_speech_token_dict[key]  # llm_job appends to this very list
    pad = hops.prompt_pad(int(inputs["flow_prompt_speech_token"].shape[1]))
    offset, hop = 0, hops.first
    while True:
        this_hop = hop + pad if offset == 0 else hop
        need = this_hop + hops.lookahead
        watch.wait_until(functools.partial(_enough, tokens, offset + need, model.llm_end_dict, key))
        watch.raise_if_failed()
        ended = model.llm_end_dict[key]  # read before the count: once it is True every token is stored
        if len(tokens) - offset >= need:
            yield _token2wav(model, inputs, key, tokens[: offset + need], offset, finalize=False, stream=True)
            offset, hop = offset + this_hop, min(hops.most, int(hop * hops.scale))
        elif ended:
            break
    job.join()
    watch.raise_if_failed()
    yield _token2wav(model, inputs, key, tokens, offset, finalize=True)


def _enough(tokens: list[int], until: int, ended: dict[str, bool], key: str) -> bool:
    return len(tokens) >= until or ended[key]


def _token2wav(
    model: Any,
    inputs: dict[str, torch.Tensor],
    key: str,
    tokens: list[int],
    offset: int,
    finalize: bool,
    stream: bool = False,
    speed: float = 1.0,
) -> torch.Tensor:
    speech: torch.Tensor = model.token2wav(
        token=torch.tensor(tokens, dtype=torch.int64).unsqueeze(0),
        prompt_token=inputs.get("flow_prompt_speech_token", _empty(1, 0)),
        prompt_feat=inputs.get("prompt_speech_feat", _empty(1, 0, 80, dtype=torch.float32)),
        embedding=inputs.get("flow_embedding", _empty(0, 192, dtype=torch.float32)),
        token_offset=offset,
        uuid=key,
        stream=stream,
        finalize=finalize,
        speed=speed,
    )
    return speech.cpu()


def _end(model: Any, watch: LlmWatch, job: threading.Thread, finished: bool) -> None:
    if not finished:
        watch.cancel.set()  # the token loop stops at its next token
    job.join(timeout=STOP_WAIT_S)
    if job.is_alive():
        log.warning("upstream llm_job did not stop within %.0f s", STOP_WAIT_S)
    with model.lock:
        for name in SESSION_DICTS:
            getattr(model, name).pop(watch.request_id, None)
