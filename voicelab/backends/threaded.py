"""Several requests of one backend at once, each on a thread of its own, their chunks merged into ``BatchEvent``s.

For backends that batch below the request: CosyVoice's speech-token LLM advances every running request in one
shared decode step (``cosyvoice.batch_decode``), so the engine's micro-batch becomes requests running side by
side, each through the backend's one-request path, and each request's chunks reach its caller as they come.
A request that fails fails alone. Torch-free: the backend supplies what each thread must set up first.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager

from voicelab.backends.base import AudioChunk, BatchEvent, SpeechRequest

log = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 60.0  # a chunk in flight when the caller leaves finishes first


class ReusedThreads:
    """Daemon threads that take work in turn and live on between calls: a new one only when none is idle, so
    there are as many as the most work ever run at once.

    Reused because PyTorch keeps state per thread that is costly to rebuild: cuDNN's execution plans are
    ``thread_local`` in its v8 convolution path, so a fresh thread plans every convolution shape again (on the
    H200, CosyVoice's first vocoder call took 67-125 ms in a new thread per job, 16-34 in reused ones).
    Daemon threads, unlike ``ThreadPoolExecutor``'s: work stuck on the device must not keep a worker process
    alive once its parent has gone. ``setup`` runs once in each thread before its first work."""

    def __init__(self, name: str, setup: Callable[[], object] = lambda: None) -> None:
        self.name, self.setup = name, setup
        self._work: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    def run(self, work: Callable[[], object]) -> None:
        """``work`` on an idle thread, or on a new one."""
        self._work.put(work)
        if self._idle.acquire(blocking=False):
            return
        with self._lock:
            thread = threading.Thread(target=self._serve, name=f"{self.name}-{len(self.threads)}", daemon=True)
            self.threads.append(thread)
            thread.start()

    def _serve(self) -> None:
        self.setup()
        while True:
            work = self._work.get()
            try:
                work()
            except Exception:  # the work reports its own failures; this thread must live on
                log.exception("%s: unexpected error", threading.current_thread().name)
            self._idle.release()


def concurrent_events(
    requests: Sequence[SpeechRequest],
    synthesize: Callable[[SpeechRequest], Iterator[AudioChunk]],
    thread_context: Callable[[], AbstractContextManager[object]],
    threads: ReusedThreads,
) -> Iterator[BatchEvent]:
    """Every request's chunks as events (``batch_end`` None: each chunk stands alone), then one ``last`` event
    per request (with its error, if it failed), each request on a thread of ``threads``. Closing the iterator
    early stops the requests at their next chunk."""
    events: queue.Queue[BatchEvent] = queue.Queue()
    stop = threading.Event()
    finished = [threading.Event() for _ in requests]

    def work(index: int, request: SpeechRequest) -> None:
        try:
            run_one(index, request)
        finally:
            finished[index].set()

    def run_one(index: int, request: SpeechRequest) -> None:
        try:
            with thread_context():
                chunks = synthesize(request)
                try:
                    for chunk in chunks:
                        if stop.is_set():
                            return
                        events.put(BatchEvent(index, chunk=chunk))
                finally:
                    close = getattr(chunks, "close", None)
                    if close is not None:
                        close()  # the backend's own cleanup runs in this thread, now
            events.put(BatchEvent(index, last=True))
        except Exception as exc:  # this request's failure, reported as its event; the others go on
            events.put(BatchEvent(index, error=exc, last=True))

    for i, request in enumerate(requests):
        threads.run(functools.partial(work, i, request))
    try:
        remaining = len(requests)
        while remaining:
            event = events.get()
            remaining -= event.last
            yield event
    finally:
        stop.set()
        for i, done in enumerate(finished):
            if not done.wait(timeout=JOIN_TIMEOUT_S):
                log.warning("request %d did not stop within %.0f s", i, JOIN_TIMEOUT_S)
