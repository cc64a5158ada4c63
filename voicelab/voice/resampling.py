"""Polyphase resampling in PyTorch, on the caller's device: the same filter and alignment as ``resample_poly``.

A cloned request's scoring resamples the output and the unmatched draft to the encoders' 16 kHz; on an H200 the
host's ``scipy.signal.resample_poly`` was the largest share of that scoring (10.8 ms for 10.7 s of speech, 28.7 ms
for 32 s: docs/benchmarks.md). Here the same Kaiser-windowed low-pass filter (scipy's design, ``firwin``) is laid
out by phase once per rate pair and device, and every output sample is a dot product of ~28 gathered taps, so
the device does a whole batch in ~28 steps, with no FFT (no cuFFT plan per new length).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from scipy.signal import firwin

KAISER_BETA = 5.0  # resample_poly's default window
HALF_LENGTH_PER_RATE = 10  # resample_poly's filter: 10 * max(up, down) taps either side


@functools.lru_cache(maxsize=8)
def _phases(up: int, down: int, device: str) -> tuple[torch.Tensor, int, int]:
    """The filter as (up, taps) by phase (row p holds h[p], h[p + up], ...), its centre's output offset, its delay."""
    half = HALF_LENGTH_PER_RATE * max(up, down)
    h = firwin(2 * half + 1, 1.0 / max(up, down), window=("kaiser", KAISER_BETA)) * up
    pre_pad = down - half % down
    taps = math.ceil((len(h) + pre_pad) / up)
    padded = np.zeros(taps * up)
    padded[pre_pad : pre_pad + len(h)] = h
    table = torch.from_numpy(padded.reshape(taps, up).T.copy()).float().to(device)
    return table, (half + pre_pad) // down, taps


def resampled_length(n: int, sr_from: int, sr_to: int) -> int:
    """How many samples ``n`` at ``sr_from`` become at ``sr_to``: ceil(n * sr_to / sr_from), as ``resample_poly``."""
    return -(-n * sr_to // sr_from)


def resample_rows(x: torch.Tensor, sr_from: int, sr_to: int) -> torch.Tensor:
    """Each row of ``x`` (B, N) from ``sr_from`` to ``sr_to`` Hz (B, ``resampled_length(N)``), as ``resample_poly``."""
    g = math.gcd(sr_from, sr_to)
    up, down = sr_to // g, sr_from // g
    if up == down:
        return x.float()
    table, skip, taps = _phases(up, down, str(x.device))
    n = x.shape[-1]
    count = resampled_length(n, sr_from, sr_to)
    at = (torch.arange(count, device=x.device, dtype=torch.int64) + skip) * down  # in the upsampled stream
    newest = at // up - torch.arange(taps, device=x.device).unsqueeze(-1)  # input samples each output reads
    weights = table[at % up].T  # (taps, count)
    weights = torch.where((newest >= 0) & (newest < n), weights, torch.zeros_like(weights))
    source, out = x.float(), x.new_zeros(x.shape[0], count, dtype=torch.float32)
    for tap in range(taps):  # a tap at a time: no (B, taps, count) tensor for a long clip
        out += source[:, newest[tap].clamp(0, n - 1)] * weights[tap]
    return out
