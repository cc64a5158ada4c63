"""First audio first: a request still waiting for its first chunk goes ahead of other requests' later chunks.

With several streamed requests side by side, every request's token-to-wave calls (the flow's ODE steps and the
vocoder) queue on the one GPU with the shared LLM's decode steps. A request that has just arrived needs a few dozen
tokens and one flow call before its caller hears anything, while the requests already playing have audio in hand.
Through the HTTP API on the H200 (2026-12-02, CosyVoice2, 188 characters streamed) the first byte came after 0.21 s
alone and 1.16 s with 8 clients: the newcomer's decode steps and first flow call waited behind the others' later
chunks. ``FirstAudioFirst`` holds later chunks back while any request is waiting for its first audio, for at most
``most_wait_s`` (so a steady stream of newcomers cannot starve the requests already playing); decode steps are never
held, so the held requests' tokens keep coming and their next chunks are ready once the newcomer has its audio.

Holding later chunks back only stops new ones: the calls already on the GPU when a newcomer arrives (up to one per
playing request, all queued on the same device) still run before the newcomer's decode steps and first chunk.
``slots`` bounds how many token-to-wave calls are in flight at once, and a first chunk waiting for a slot takes the
next one before any later chunk does; 0 leaves the calls unbounded.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator


class FirstAudioFirst:
    """Thread-safe; shared by every request of one loaded model. ``enabled`` off: nobody waits (the A/B switch)."""

    def __init__(self, enabled: bool = True, most_wait_s: float = 1.0, slots: int = 0) -> None:
        self.enabled = enabled
        self.most_wait_s = most_wait_s
        self.slots = slots
        self._waiting = 0
        self._running = 0  # token-to-wave calls in flight
        self._firsts_queued = 0  # first chunks waiting for a slot
        self._changed = threading.Condition()
        self.held_s = 0.0  # later chunks' total wait, for the log and the tests

    @property
    def waiting(self) -> int:
        """Requests that have not made their first audio yet."""
        with self._changed:
            return self._waiting

    @contextlib.contextmanager
    def opening(self) -> Iterator[Opening]:
        """Around a request from its arrival until its first chunk is made (``Opening.done``) or it ends."""
        opening = Opening(self)
        with self._changed:
            self._waiting += 1
        try:
            yield opening
        finally:
            opening.done()

    def _opened(self) -> None:
        with self._changed:
            self._waiting -= 1
            self._changed.notify_all()

    def before_later_chunk(self) -> float:
        """Wait while some request still waits for its first audio, at most ``most_wait_s``; the seconds waited."""
        if not self.enabled:
            return 0.0
        started = time.monotonic()
        deadline = started + self.most_wait_s
        with self._changed:
            while self._waiting and (left := deadline - time.monotonic()) > 0:
                self._changed.wait(left)
            waited = time.monotonic() - started
            self.held_s += waited
        return waited

    @property
    def running(self) -> int:
        """Token-to-wave calls in flight now."""
        with self._changed:
            return self._running

    @contextlib.contextmanager
    def slot(self, first: bool) -> Iterator[None]:
        """Around one token-to-wave call: with ``slots`` set, wait for a free one; a ``first`` chunk (its request's
        first audio) goes before every later chunk waiting. Unbounded (today's order) when off or ``slots`` is 0."""
        if not self.enabled or self.slots <= 0:
            yield
            return
        with self._changed:
            self._firsts_queued += first
            try:
                while self._running >= self.slots or (not first and self._firsts_queued):
                    self._changed.wait()
            finally:
                self._firsts_queued -= first
            self._running += 1
        try:
            yield
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()


class Opening:
    """One request's place among those waiting for their first audio; ``done`` once (later calls do nothing)."""

    def __init__(self, order: FirstAudioFirst) -> None:
        self._order = order
        self._done = False

    @property
    def pending(self) -> bool:
        return not self._done

    def done(self) -> None:
        if not self._done:
            self._done = True
            self._order._opened()
