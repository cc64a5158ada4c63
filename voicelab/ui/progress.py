"""Progress lines that say what is really happening: waiting in line, a voice being fitted, sentences made so far,
who is in flight.

A queued job says how many jobs run before it and never "processing"; a voice fitted to the prompt counts its
steps ("fitting voice: step 40 of 120", as the engine reports them); a long text counts its sentences (done of
total, as the engine's chunks arrive); jobs are named by their first words, never a hash.
"""

from __future__ import annotations

import re

from voicelab.engine.messages import ChunkReady, JobProgress
from voicelab.studio import Queued

SENTENCE_END = re.compile(r"(?<=[.!?;。！？；…])[\"'\u201d\u2019)）]*\s*")
FIRST_WORDS = 6
FIRST_HANZI = 12


def count_sentences(text: str) -> int:
    """Sentences as a reader counts them (punctuation-ended runs); at least 1 for any text."""
    return max(1, sum(1 for part in SENTENCE_END.split(text) if part.strip()))


def first_words(text: str, words: int = FIRST_WORDS) -> str:
    """The job as a user recognises it: “The quick brown fox jumps over…” (Chinese: its first characters)."""
    clean = " ".join(text.split())
    if not clean:
        return "“…”"
    parts = clean.split(" ")
    if len(parts) == 1 or any("\u4e00" <= ch <= "\u9fff" for ch in parts[0]):
        head = clean[:FIRST_HANZI] if len(parts) == 1 else " ".join(parts[:words])
        return f"“{head}{'…' if len(head) < len(clean) else ''}”"
    head = " ".join(parts[:words])
    return f"“{head}{'…' if len(parts) > words else ''}”"


def queued_line(event: Queued) -> str:
    """Shown while a job waits; its place in line, or the worker it waits for."""
    waited = f" (waiting {event.waited_s:.0f} s)" if event.waited_s >= 1.0 else ""
    if event.no_worker:
        return f"Queued: the engine's worker is starting (loading the model){waited}."
    if event.ahead == 0:
        return f"Queued: next in line{waited}."
    jobs = "job" if event.ahead == 1 else "jobs"
    return f"Queued: {event.ahead} {jobs} ahead of you{waited}."


def progress_line(event: JobProgress) -> str:
    """Shown while the job works before its first chunk, e.g. "Fitting voice: step 40 of 120…"."""
    line = event.line()
    return f"{line[:1].upper()}{line[1:]}…"


class SentenceCount:
    """Sentences done of total as chunks arrive (a backend may send several chunks for one sentence)."""

    def __init__(self, text: str) -> None:
        self.total = count_sentences(text)
        self.done = 0
        self._last = ""

    def add(self, chunk: ChunkReady) -> None:
        text = chunk.chunk.text.strip()
        if not text or text != self._last:
            self.done += 1
        self._last = text
        self.total = max(self.total, self.done)

    def line(self, chunk: ChunkReady, heard_s: float) -> str:
        """E.g. "Generating… sentence 2 of 5 ready (3.1 s of audio so far, 1.2 s)"; playing starts with the first."""
        return (
            f"Generating… sentence {self.done} of {self.total} ready "
            f"({heard_s:.1f} s of audio so far, {chunk.elapsed_s:.1f} s)"
        )
