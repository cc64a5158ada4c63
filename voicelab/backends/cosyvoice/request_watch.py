"""What happens in upstream's ``llm_job`` thread for each request, so several requests can share one model.

Upstream's thread swallows its own exceptions (the caller later fails with a misleading vocoder error, or waits
forever when streaming) and cannot be stopped. ``install_guards`` wraps this model instance's ``llm_job`` and
``llm.inference`` (no upstream module is modified): the thread's error is kept and raised as
``BackendRuntimeError``, a cancelled request stops at its next token, and every new token wakes the request's
audio loop (``speech_loop.speak``) instead of it polling.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Any

import torch

from voicelab.errors import BackendRuntimeError, VoiceLabError

log = logging.getLogger(__name__)
MIN_TOKENS, TOKENS_PER_TEXT_TOKEN = 20, 4


def token_limit(text_tokens: int, cap: int) -> int:
    """How many speech tokens a random-weight LLM is made to emit: clamp(4 * text tokens, 20, cap)."""
    return max(MIN_TOKENS, min(TOKENS_PER_TEXT_TOKEN * text_tokens, cap))


class LlmWatch:
    """One request's ``llm_job`` thread: its error, a way to stop it early, and a wake-up on every token.

    request_id: upstream's per-request dict key (we choose it). seed: for the batched decoder's sampler, so a
    request's tokens do not depend on which requests run beside it.
    """

    def __init__(self, request_id: str, seed: int | None = None) -> None:
        self.request_id, self.seed = request_id, seed
        self.error: BaseException | None = None
        self.started = threading.Event()
        self.done = threading.Event()
        self.cancel = threading.Event()
        self._progress = threading.Condition()

    def progressed(self) -> None:
        """Called by the thread after each token it stored and when it ends."""
        with self._progress:
            self._progress.notify_all()

    def wait_until(self, ready: Callable[[], bool], poll_s: float = 1.0) -> None:
        """Block until ``ready()`` or the thread has ended (``poll_s``: a safety net, not the wake-up)."""
        with self._progress:
            while not self._progress.wait_for(lambda: ready() or self.done.is_set(), timeout=poll_s):
                pass

    def raise_if_failed(self, cause: BaseException | None = None) -> None:
        error = self.error
        if error is None:
            return
        if isinstance(error, torch.cuda.OutOfMemoryError | VoiceLabError):
            raise error  # the engine's OOM guard (clean, retry in pieces) or an already typed error
        message = f"CosyVoice's speech-token generator failed: {type(error).__name__}: {error}"
        raise BackendRuntimeError(message) from (cause or error)


class RequestWatches:
    """Each running request's ``LlmWatch`` by its request id (the last argument of ``llm_job``); inside the thread,
    ``current`` is that watch (the token loop and the batched decoder read it). A thread not started for one of
    ours (upstream's own ``tts``) gets a watch of its own."""

    def __init__(self) -> None:
        self._by_id: dict[str, LlmWatch] = {}
        self._lock = threading.Lock()
        self._local = threading.local()

    def register(self, watch: LlmWatch) -> None:
        with self._lock:
            self._by_id[watch.request_id] = watch

    def release(self, watch: LlmWatch) -> None:
        with self._lock:
            self._by_id.pop(watch.request_id, None)

    def enter(self, request_id: str) -> LlmWatch:
        """Called first in an ``llm_job`` thread: its request's watch, now this thread's ``current``."""
        with self._lock:
            watch = self._by_id.get(request_id) or LlmWatch(request_id)
        self._local.watch = watch
        return watch

    def current(self) -> LlmWatch | None:
        return getattr(self._local, "watch", None)

    def current_seed(self) -> int | None:
        watch = self.current()
        return watch.seed if watch is not None else None


class QuietGate:
    """Counts the requests running in one model and runs a task only when none is: a CUDA graph capture must not
    overlap any other thread's random draw on the default CUDA generator (it raises there). A request arriving
    while the task runs waits for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0

    @contextlib.contextmanager
    def request(self, when_quiet: Callable[[], object] | None = None) -> Iterator[None]:
        with self._lock:
            if self._running == 0 and when_quiet is not None:
                when_quiet()
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1


def install_guards(model: Any, watches: RequestWatches, token_cap: int | None) -> None:
    """Wrap this model instance's ``llm_job`` and ``llm.inference`` (and, for random weights, its sampler)."""
    original_job: Callable[..., None] = model.llm_job
    original_inference: Callable[..., Generator[int, None, None]] = model.llm.inference

    def guarded_job(*args: Any) -> None:
        request_id = args[-1]
        watch = watches.enter(request_id)
        watch.started.set()
        try:
            original_job(*args)
        except BaseException as exc:
            watch.error = exc
            log.error("upstream llm_job failed: %s: %s", type(exc).__name__, exc)
            with model.lock:
                if request_id in model.llm_end_dict:
                    model.llm_end_dict[request_id] = True  # so a streaming caller stops waiting
        finally:
            watch.done.set()
            watch.progressed()

    def watched_inference(*args: Any, **kwargs: Any) -> Iterator[int]:
        text_len = kwargs.get("text_len")
        limit = token_limit(int(text_len.reshape(-1)[0]), token_cap) if token_cap and text_len is not None else None
        watch = watches.current()
        tokens = original_inference(*args, **kwargs)
        try:
            for count, token in enumerate(tokens):
                if (watch is not None and watch.cancel.is_set()) or (limit is not None and count >= limit):
                    return
                yield token
                if watch is not None:
                    watch.progressed()  # llm_job has stored the token by the time it asks for the next
        finally:
            tokens.close()

    model.llm_job = guarded_job
    model.llm.inference = watched_inference
    if token_cap:
        _mask_stop_tokens(model.llm)


def _mask_stop_tokens(llm: Any) -> None:
    """Random weights never choose an end token on purpose; make sure they never do by accident either."""
    stops = list(getattr(llm, "stop_token_ids", [llm.speech_token_size]))
    original: Callable[..., int] = llm.sampling

    def sampling(scores: torch.Tensor, decoded: list[int], top_k: int) -> int:
        scores[stops] = -float("inf")
        return original(scores, decoded, top_k)

    llm.sampling = sampling
