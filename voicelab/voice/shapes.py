"""Recurring tensor shapes for device work whose sizes follow the text.

A cuFFT plan is made per transform size and batch, and a cuDNN plan per convolution or RNN input shape; each
takes milliseconds to build and host memory to keep. Request lengths vary freely, so a scorer or renderer that
used each request's own sizes built new plans on most requests: the tail latency and the host growth of the
H200 soak with prompts (docs/benchmarks.md). Rounding sizes up to a step, with the padding never read or
masked out, makes them recur.
"""

from __future__ import annotations


def rounded_up(n: int, step: int) -> int:
    """The smallest multiple of ``step`` that is at least ``n`` (``step`` >= 1)."""
    return -(-n // step) * step
