"""Recurring tensor shapes for device work whose sizes follow the text.

A cuFFT plan is made per transform size and batch, and a cuDNN plan per convolution or RNN input shape; each
takes milliseconds to build and host memory to keep. Request lengths vary freely, so a scorer or renderer that
used each request's own sizes built new plans on most requests: the tail latency and the host growth of the
H200 soak with prompts (docs/benchmarks.md). Rounding sizes up, with the padding never read or masked out, makes
them recur; rounding onto a ladder (``on_ladder``: steps about a quarter apart) makes them few enough to be made
once, ahead of the requests (``CloneScorer.warm_shapes``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

LADDER_RATIO = 1.25  # each rung about a quarter above the last, as ``pulse_graphs.FRAME_LADDER``


def rounded_up(n: int, step: int) -> int:
    """The smallest multiple of ``step`` that is at least ``n`` (``step`` >= 1)."""
    return -(-n // step) * step


def rungs(step: int, ratio: float = LADDER_RATIO) -> Iterator[int]:
    """The ladder's sizes, smallest first, without end: ``step``, then each the last times ``ratio`` rounded up to
    a multiple of ``step`` (at least one ``step`` more)."""
    rung = step
    while True:
        yield rung
        rung = max(rung + step, rounded_up(math.ceil(rung * ratio), step))


def on_ladder(n: int, step: int, ratio: float = LADDER_RATIO) -> int:
    """The smallest rung of ``rungs(step, ratio)`` that is at least ``n``."""
    return next(rung for rung in rungs(step, ratio) if rung >= n)


def ladder(step: int, limit: int, ratio: float = LADDER_RATIO) -> tuple[int, ...]:
    """Every rung up to the first that reaches ``limit``: the shapes that sizes up to ``limit`` are rounded onto."""
    below = itertools.takewhile(lambda rung: rung < limit, rungs(step, ratio))
    return (*below, on_ladder(limit, step, ratio))
