"""The per-frame steps WORLD's analysis shares, batched in PyTorch: F0-adaptive windowed frames, the DC
correction below F0 and the rectangular smoothing along frequency.

WORLD (Morise et al.) analyses each frame with a window whose length follows the frame's own F0; here every frame
of a batch sits in one tensor of the widest window's size, each frame's window zero outside its own length, so
frames of any F0 go through one FFT. The frames are centred in that tensor, not started at its first sample as in
WORLD's C code: power spectra do not see the difference, and ``frame_offset`` gives what a time-weighted one
(D4C's centroid) needs to undo it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from voicelab.voice.spectral import lerp_bins

HANN, BLACKMAN = "hann", "blackman"
WIDEST_HZ = 1000.0  # the widest smoothing asked for: WORLD smooths over at most one F0, and F0 stays below this


def matlab_round(x: torch.Tensor) -> torch.Tensor:
    """Half away from zero, as WORLD rounds (``torch.round`` rounds half to even)."""
    return torch.where(x >= 0, torch.floor(x + 0.5), torch.ceil(x - 0.5))


@dataclass(frozen=True)
class Frames:
    """Windowed frames (B, T, W) and, per frame, how far its first sample sits from the tensor's first (B, T)."""

    samples: torch.Tensor
    frame_offset: torch.Tensor


def adaptive_frames(
    x: torch.Tensor,
    lengths: torch.Tensor,
    sr: int,
    f0: torch.Tensor,
    positions: torch.Tensor,
    periods: float,
    f0_floor: float,
    shape: str = HANN,
    normalise: bool = False,
) -> Frames:
    """Frames of ``x`` (B, N) at ``positions`` (B, T, seconds), each windowed over ``periods`` of its ``f0`` (B, T).

    The window (Hann or Blackman) spans ``periods`` pitch periods; ``normalise`` scales it to unit energy
    (CheapTrick); the window-weighted mean is removed from each frame, as WORLD does. ``f0_floor`` bounds the
    widest window (every ``f0`` must be at least that).
    """
    widest = int(periods * sr / f0_floor / 2.0 + 0.5) + 1
    base = torch.arange(-widest, widest + 1, device=x.device, dtype=f0.dtype)
    half = matlab_round(periods * sr / f0 / 2.0).unsqueeze(-1)
    inside = base.abs() <= half
    phase = math.pi * (2.0 * base / periods / sr) * f0.unsqueeze(-1)
    if shape == BLACKMAN:
        window = 0.42 + 0.5 * torch.cos(phase) + 0.08 * torch.cos(2.0 * phase)
    else:
        window = 0.5 * torch.cos(phase) + 0.5
    window = torch.where(inside, window, torch.zeros_like(window))
    if normalise:
        window = window / window.square().sum(-1, keepdim=True).sqrt()
    index = matlab_round(positions.unsqueeze(-1) * sr + base).long()
    index = torch.minimum(index.clamp_min(0), (lengths - 1).view(-1, 1, 1))
    b, t, w = index.shape
    samples = x.gather(1, index.reshape(b, t * w)).reshape(b, t, w).to(f0.dtype) * window
    weight = samples.sum(-1, keepdim=True) / window.sum(-1, keepdim=True)
    return Frames(samples - window * weight, widest - half.squeeze(-1))


def power_spectrum(frames: torch.Tensor, fft_size: int) -> torch.Tensor:
    """|FFT|^2 of each frame (…, fft_size // 2 + 1)."""
    return torch.fft.rfft(frames, fft_size).abs().square()


def dc_correction(spectrum: torch.Tensor, f0: torch.Tensor, sr: int, fft_size: int) -> torch.Tensor:
    """Below F0, each bin gets the spectrum's value mirrored about F0 added (WORLD's DCCorrection)."""
    k = spectrum.shape[-1]
    bins = torch.arange(k, device=spectrum.device, dtype=spectrum.dtype)
    f0_bins = (f0 * fft_size / sr).unsqueeze(-1)
    below = bins < torch.floor(f0_bins) + 1.0  # WORLD: i < upper_limit - 1, upper_limit = 2 + int(f0 * N / fs)
    replica = lerp_bins(spectrum, (f0_bins - bins).expand_as(spectrum))
    return torch.where(below, spectrum + replica, spectrum)


def linear_smoothing(spectrum: torch.Tensor, width_hz: torch.Tensor, sr: int, fft_size: int) -> torch.Tensor:
    """A rectangular moving average ``width_hz`` (…,) wide along frequency, the ends mirrored (LinearSmoothing).

    In float64 whatever the input: the average is a difference of running sums, and a power spectrum spans more
    orders of magnitude than float32's seven digits keep (the highest bins came out 10-300 dB off)."""
    dtype = spectrum.dtype
    spectrum, width_hz = spectrum.double(), width_hz.double()
    k = spectrum.shape[-1]
    step = sr / fft_size
    pad = min(k - 1, int(WIDEST_HZ / step) + 2)  # a fixed bound: the widths never leave the device to be read
    shape = spectrum.shape
    flat = spectrum.reshape(-1, 1, k)
    mirrored = F.pad(flat, (pad, pad), mode="reflect").reshape(*shape[:-1], k + 2 * pad)
    cumulative = mirrored.cumsum(-1) * step  # entry j: the integral up to (j - pad + 0.5) bins
    bins = torch.arange(k, device=spectrum.device, dtype=spectrum.dtype)
    half = (width_hz / step / 2.0).unsqueeze(-1)
    low = lerp_bins(cumulative, bins - half + pad - 0.5)
    high = lerp_bins(cumulative, bins + half + pad - 0.5)
    return ((high - low) / width_hz.unsqueeze(-1)).to(dtype)
