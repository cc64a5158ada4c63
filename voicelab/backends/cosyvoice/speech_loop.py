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

import contextlib
import functools
import logging
import math
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from voicelab.backends.cosyvoice.first_audio import FirstAudioFirst, Opening
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


class LlmThread(Protocol):
    """A started ``llm_job``: joined when the request ends, asked whether it still runs when it would not stop."""

    def join(self, timeout: float | None = None) -> None: ...

    def is_alive(self) -> bool: ...


ThreadStarter = Callable[[Callable[..., None], tuple[Any, ...]], LlmThread]


def new_thread(target: Callable[..., None], args: tuple[Any, ...]) -> LlmThread:
    """Upstream's way, and the default: a new thread for each request's ``llm_job``."""
    thread = threading.Thread(target=target, args=args, name="cosyvoice-llm", daemon=True)
    thread.start()
    return thread


class _PooledJob:
    def __init__(self, future: Future[None]) -> None:
        self.future = future

    def join(self, timeout: float | None = None) -> None:
        wait([self.future], timeout=timeout)

    def is_alive(self) -> bool:
        return not self.future.done()


class PooledThreads:
    """``llm_job`` on a fixed set of reused threads instead of a new one per request: the A/B of
    ``python -m tools.cosyvoice_host_memory --llm-threads pooled`` (PyTorch keeps native state per thread that a
    process starting a thread per request may pile up, pytorch/pytorch#64412; on the H200 it changed nothing, +1.80 MiB
    per call pooled against +1.81 new, 2026-12-02: ``llm_job`` runs no convolution, so no cuDNN plans are lost with
    its thread). ``workers`` bounds the requests whose token loops run at once; a request beyond waits for one."""

    def __init__(self, workers: int) -> None:
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cosyvoice-llm")

    def __call__(self, target: Callable[..., None], args: tuple[Any, ...]) -> LlmThread:
        return _PooledJob(self.pool.submit(target, *args))


def _empty(*shape: int, dtype: torch.dtype = torch.int32) -> torch.Tensor:
    return torch.zeros(*shape, dtype=dtype)


def speak(
    model: Any,
    inputs: dict[str, torch.Tensor],
    watch: LlmWatch,
    hops: Hops,
    stream: bool,
    speed: float = 1.0,
    start: ThreadStarter = new_thread,
    order: FirstAudioFirst | None = None,
    opens: bool = False,
) -> Iterator[torch.Tensor]:
    """Upstream's audio for one request (``inputs``: ``tts``'s keyword arguments), chunk by chunk when ``stream``;
    ``start`` runs its ``llm_job``. Streamed, with ``order``: a call that ``opens`` a request (its first audio) is
    counted as waiting until its first chunk is made, and every other chunk first lets those go ahead
    (``first_audio.py``). However the caller leaves, the thread is stopped and the request's per-request entries
    are dropped."""
    key = watch.request_id
    with model.lock:
        model.tts_speech_token_dict[key], model.llm_end_dict[key], model.hift_cache_dict[key] = [], False, None
    prompt_text = inputs.get("prompt_text", _empty(1, 0))
    prompt_token = inputs.get("llm_prompt_speech_token", _empty(1, 0))
    embedding = inputs.get("llm_embedding", _empty(0, 192, dtype=torch.float32))
    args = (inputs["text"], prompt_text, prompt_token, embedding, key)
    job = start(model.llm_job, args)
    finished = False
    try:
        if stream:
            yield from _streamed(model, inputs, watch, hops, job, order, opens)
        else:
            job.join()
            watch.raise_if_failed()
            yield _token2wav(model, inputs, key, model.tts_speech_token_dict[key], 0, finalize=True, speed=speed)
        finished = True
    finally:
        _end(model, watch, job, finished)


def _streamed(
    model: Any,
    inputs: dict[str, torch.Tensor],
    watch: LlmWatch,
    hops: Hops,
    job: LlmThread,
    order: FirstAudioFirst | None,
    opens: bool,
) -> Iterator[torch.Tensor]:
    key = watch.request_id
    tokens: list[int] = model.tts_speech_token_dict[key]  # llm_job appends to this very list
    pad = hops.prompt_pad(int(inputs["flow_prompt_speech_token"].shape[1]))
    offset, hop = 0, hops.first
    opening_of = order.opening() if order is not None and opens else contextlib.nullcontext(None)
    with opening_of as opening:
        while True:
            this_hop = hop + pad if offset == 0 else hop
            need = this_hop + hops.lookahead
            watch.wait_until(functools.partial(_enough, tokens, offset + need, model.llm_end_dict, key))
            watch.raise_if_failed()
            ended = model.llm_end_dict[key]  # read before the count: once it is True every token is stored
            if len(tokens) - offset >= need:
                _take_turn(order, opening)
                with _slot(order, opening):
                    speech = _token2wav(
                        model, inputs, key, tokens[: offset + need], offset, finalize=False, stream=True
                    )
                yield _opened(speech, opening)
                offset, hop = offset + this_hop, min(hops.most, int(hop * hops.scale))
            elif ended:
                break
        job.join()
        watch.raise_if_failed()
        _take_turn(order, opening)
        with _slot(order, opening):
            speech = _token2wav(model, inputs, key, tokens, offset, finalize=True)
        yield _opened(speech, opening)


def _take_turn(order: FirstAudioFirst | None, opening: Opening | None) -> None:
    """A chunk that is not its request's first audio lets the requests waiting for theirs go first."""
    if order is not None and (opening is None or not opening.pending):
        order.before_later_chunk()


def _slot(order: FirstAudioFirst | None, opening: Opening | None) -> contextlib.AbstractContextManager[None]:
    """One token-to-wave call's place among those in flight (``FirstAudioFirst.slot``); a first chunk goes first."""
    if order is None:
        return contextlib.nullcontext()
    return order.slot(first=opening is not None and opening.pending)


def _opened(speech: torch.Tensor, opening: Opening | None) -> torch.Tensor:
    if opening is not None:
        opening.done()
    return speech


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


def _end(model: Any, watch: LlmWatch, job: LlmThread, finished: bool) -> None:
    if not finished:
        watch.cancel.set()  # the token loop stops at its next token
    job.join(timeout=STOP_WAIT_S)
    if job.is_alive():
        log.warning("upstream llm_job did not stop within %.0f s", STOP_WAIT_S)
    with model.lock:
        for name in SESSION_DICTS:
            getattr(model, name).pop(watch.request_id, None)
