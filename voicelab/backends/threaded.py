"""Several requests of one backend at once, each in its own thread, their chunks merged into ``BatchEvent``s.

For backends that batch below the request: CosyVoice's speech-token LLM advances every running request in one
shared decode step (``cosyvoice.batch_decode``), so the engine's micro-batch becomes requests running side by
side, each through the backend's one-request path, and each request's chunks reach its caller as they come.
A request that fails fails alone. Torch-free: the backend supplies what each thread must set up first.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager

from voicelab.backends.base import AudioChunk, BatchEvent, SpeechRequest

log = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 60.0  # a chunk in flight when the caller leaves finishes first


def concurrent_events(
    requests: Sequence[SpeechRequest],
    synthesize: Callable[[SpeechRequest], Iterator[AudioChunk]],
    thread_context: Callable[[], AbstractContextManager[object]],
) -> Iterator[BatchEvent]:
    """Every request's chunks as events (``batch_end`` None: each chunk stands alone), then one ``last`` event
    per request (with its error, if it failed). Closing the iterator early stops the threads at their next chunk."""
    events: queue.Queue[BatchEvent] = queue.Queue()
    stop = threading.Event()

    def work(index: int, request: SpeechRequest) -> None:
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

    threads = [
        threading.Thread(target=work, args=(i, r), name=f"voicelab-request-{i}", daemon=True)
        for i, r in enumerate(requests)
    ]
    for thread in threads:
        thread.start()
    try:
        remaining = len(threads)
        while remaining:
            event = events.get()
            remaining -= event.last
            yield event
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=JOIN_TIMEOUT_S)
            if thread.is_alive():
                log.warning("%s did not stop within %.0f s", thread.name, JOIN_TIMEOUT_S)
