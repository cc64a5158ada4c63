"""Sentence-level subtitles (SubRip) from a take's chunks: each chunk is one sentence, so its boundaries are the
cue times. Used by the HTTP API (``response_format=srt``) and the UI's SRT download; Gradio-free.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Cue:
    """One subtitle: a sentence and when it is heard (seconds from the start)."""

    start_s: float
    end_s: float
    text: str


def cues(pieces: Iterable[tuple[str, float]], gap_s: float) -> list[Cue]:
    """Cues from (sentence, chunk seconds) in order; every chunk but the first starts with ``gap_s`` of silence."""
    found, offset = [], 0.0
    for index, (text, seconds) in enumerate(pieces):
        lead = min(gap_s, seconds) if index else 0.0
        if text.strip():
            found.append(Cue(offset + lead, offset + seconds, " ".join(text.split())))
        offset += seconds
    return found


def _timestamp(seconds: float) -> str:
    millis = round(seconds * 1000)
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d},{millis:03d}"


def to_srt(found: Iterable[Cue]) -> str:
    """SubRip text: numbered cues, ``HH:MM:SS,mmm --> HH:MM:SS,mmm``, a blank line after each."""
    blocks = [
        f"{n}\n{_timestamp(c.start_s)} --> {_timestamp(c.end_s)}\n{c.text}\n" for n, c in enumerate(found, start=1)
    ]
    return "\n".join(blocks)
