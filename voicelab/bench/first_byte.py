"""Time to first byte through the HTTP API, per client count: the ``bench load --api --clients 1,8,16`` summary.

Each API client's request is read as a stream; its outcome keeps when the first audio byte arrived, so the run
says what a caller waits before hearing anything, alone and with others at once (the CosyVoice goal: at 8 clients
no more than twice the lone figure). ``--format pcm`` streams raw audio as it is made (``wav`` answers when done).
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

GOAL_CLIENTS = 8
GOAL_RATIO = 2.0


def client_counts(text: str) -> list[int]:
    """``"1,8,16"`` -> [1, 8, 16] (each at least 1, in the order given, no repeats)."""
    counts: list[int] = []
    for part in text.split(","):
        if not part.strip():
            continue
        count = int(part)
        if count < 1:
            raise argparse.ArgumentTypeError(f"a client count must be at least 1, not {count}")
        if count not in counts:
            counts.append(count)
    if not counts:
        raise argparse.ArgumentTypeError("give at least one client count")
    return counts


def add_stream_flags(parser: argparse.ArgumentParser) -> None:
    """The API mode's request shape: format, text length, voice, and the app's own flags."""
    parser.add_argument("--format", default="wav", choices=("wav", "pcm"), help="with --api: pcm streams")
    parser.add_argument("--chars", type=int, default=0, help="text of about this many characters (0: a sentence)")
    parser.add_argument("--voice", default="", help="with --api: a saved voice's name (default: the backend's)")
    parser.add_argument("--app-args", default="", help="more flags for app.py when starting it, one string")


def request_text(sentences: Sequence[str], start: int, chars: int) -> str:
    """Whole sentences from ``start`` on (wrapping), as many as bring the length closest to ``chars`` (at least
    one; one when ``chars`` is 0)."""
    text = sentences[start % len(sentences)]
    index = start + 1
    while len(text) < chars:
        longer = f"{text} {sentences[index % len(sentences)]}"
        if len(longer) - chars > chars - len(text):
            break
        text, index = longer, index + 1
    return text


def nearest_rank(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


@dataclass(frozen=True)
class FirstByteRow:
    """One client count: how many answered with audio, first byte p50/p95 and the whole answer's p50 (s)."""

    clients: int
    ok: int
    first_p50_s: float
    first_p95_s: float
    whole_p50_s: float


def first_byte_row(clients: int, first_bytes: Sequence[float], wholes: Sequence[float]) -> FirstByteRow:
    if not first_bytes:
        return FirstByteRow(clients, 0, math.nan, math.nan, math.nan)
    return FirstByteRow(
        clients,
        len(first_bytes),
        statistics.median(first_bytes),
        nearest_rank(first_bytes, 0.95),
        statistics.median(wholes),
    )


def summary_lines(rows: Sequence[FirstByteRow], label: str) -> list[str]:
    """The table, each p50 over the lone one's, and the goal line at ``GOAL_CLIENTS`` when both were measured."""
    lone = next((r for r in rows if r.clients == 1), None)
    lines = [f"time to first byte through the API ({label}):"]
    lines.append(f"{'clients':>7} {'ok':>5} {'first p50 s':>11} {'first p95 s':>11} {'whole p50 s':>11} {'÷ alone':>8}")
    for row in rows:
        ratio = row.first_p50_s / lone.first_p50_s if lone and lone.ok and row.ok else math.nan
        lines.append(
            f"{row.clients:>7} {row.ok:>5} {row.first_p50_s:>11.3f} {row.first_p95_s:>11.3f} "
            f"{row.whole_p50_s:>11.3f} {ratio:>8.2f}"
        )
    at_goal = next((r for r in rows if r.clients == GOAL_CLIENTS), None)
    if lone is not None and at_goal is not None and lone.ok and at_goal.ok:
        ratio = at_goal.first_p50_s / lone.first_p50_s
        verdict = "meets" if ratio <= GOAL_RATIO else f"misses by x{ratio / GOAL_RATIO:.2f}"
        lines.append(
            f"first byte p50 at {GOAL_CLIENTS} clients ÷ alone: x{ratio:.2f} "
            f"({at_goal.first_p50_s:.3f} s vs {lone.first_p50_s:.3f} s; goal ≤ x{GOAL_RATIO:g}: {verdict})"
        )
    return lines
