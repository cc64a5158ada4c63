"""F0 tracking in PyTorch, batched, on the worker's device: YIN (de Cheveigné & Kawahara 2002).

The voice transform needs F0 on its own frame grid, for a batch of chunks, without leaving the device; Praat
(``analysis.pitch_track``) stays the ruler for prompts and evaluation. YIN's cumulative mean normalised
difference looks for the period, not the strongest harmonic, so the built-in voice's weak fundamental (where
WORLD's dio locked onto the second harmonic) is tracked at its true ~90 Hz. Octave slips against the
utterance's median are folded back and the track is median-filtered over five frames.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

F0_FLOOR_HZ = 60.0
F0_CEILING_HZ = 500.0
THRESHOLD = 0.15  # the first dip of the normalised difference below this is the period
UNVOICED = 0.35  # no dip below this: unvoiced
SILENCE_DB = 40.0  # frames this far below the loudest frame are unvoiced
_MEDIAN_FRAMES = 5


def frame_signal(x: torch.Tensor, frame: int, hop: int, lead: int | None = None) -> torch.Tensor:
    """(B, N) -> (B, T, frame), frame t starting ``lead`` (default frame // 2) samples before t * hop."""
    lead = frame // 2 if lead is None else lead
    padded = F.pad(x, (lead, frame + hop))
    frames = padded.unfold(-1, frame, hop)
    return frames[:, : x.shape[-1] // hop + 1]


def yin_f0(x: torch.Tensor, sr: int, hop: int, unvoiced: float = UNVOICED) -> torch.Tensor:
    """F0 in Hz per frame (B, T), 0 where unvoiced (no dip below ``unvoiced``); frames centred every ``hop``
    samples."""
    lag_min = max(2, int(sr / F0_CEILING_HZ))
    lag_max = math.ceil(sr / F0_FLOOR_HZ)
    window = max(lag_max, int(0.025 * sr))
    frames = frame_signal(x, window + lag_max + 1, hop, lead=window // 2)  # the summed window centred
    cmnd = _normalised_difference(frames, window, lag_max)
    lag, depth = _first_dip(cmnd, lag_min, lag_max)
    energy = frames[..., :window].square().mean(-1).clamp_min(1e-12)
    level = 10.0 * torch.log10(energy)
    loud = level > level.amax(dim=-1, keepdim=True) - SILENCE_DB
    voiced = (depth < unvoiced) & loud
    f0 = torch.where(voiced, sr / lag, torch.zeros_like(lag))
    return _smooth(_fold_octaves(f0))


def _normalised_difference(frames: torch.Tensor, window: int, lag_max: int) -> torch.Tensor:
    """YIN's d'(tau) for tau = 0..lag_max, via one FFT cross-correlation per frame."""
    n = frames.shape[-1]
    size = 1 << (n + window - 1).bit_length()
    head = frames[..., :window]
    spectrum = torch.fft.rfft(frames, size) * torch.fft.rfft(head, size).conj()
    corr = torch.fft.irfft(spectrum, size)[..., : lag_max + 1]
    power = F.pad(frames.square().cumsum(-1), (1, 0))
    lags = torch.arange(lag_max + 1, device=frames.device)
    shifted = power[..., lags + window] - power[..., lags]
    diff = (shifted[..., :1] + shifted - 2.0 * corr).clamp_min(0.0)
    running = diff[..., 1:].cumsum(-1) / lags[1:]
    out = torch.ones_like(diff)
    out[..., 1:] = diff[..., 1:] / running.clamp_min(1e-12)
    return out


def _first_dip(cmnd: torch.Tensor, lag_min: int, lag_max: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The period (fractional lag, parabolic refinement) and the dip's depth, per frame."""
    inner = cmnd[..., lag_min:lag_max]
    left, right = cmnd[..., lag_min - 1 : lag_max - 1], cmnd[..., lag_min + 1 : lag_max + 1]
    dips = (inner < THRESHOLD) & (inner <= left) & (inner <= right)
    has_dip = dips.any(-1)
    first = torch.where(has_dip, dips.int().argmax(-1), inner.argmin(-1))
    tau = first + lag_min
    a = cmnd.gather(-1, (tau - 1).unsqueeze(-1)).squeeze(-1)
    b = cmnd.gather(-1, tau.unsqueeze(-1)).squeeze(-1)
    c = cmnd.gather(-1, (tau + 1).unsqueeze(-1)).squeeze(-1)
    curve = a - 2.0 * b + c
    offset = torch.where(curve > 1e-9, 0.5 * (a - c) / curve.clamp_min(1e-9), torch.zeros_like(b))
    return tau.to(cmnd.dtype) + offset.clamp(-1.0, 1.0), b


def voiced_median(f0: torch.Tensor) -> torch.Tensor:
    """Median F0 of the voiced frames per row (B,), 0 for a row with none."""
    masked = torch.where(f0 > 0, f0, torch.full_like(f0, float("nan")))
    median = torch.nanmedian(masked, dim=-1).values
    return torch.nan_to_num(median, nan=0.0)


def _fold_octaves(f0: torch.Tensor) -> torch.Tensor:
    """Frames an octave off the utterance's median (ratio beyond 1.7 or below 0.59) moved back by an octave."""
    median = voiced_median(f0).unsqueeze(-1).clamp_min(1e-6)
    ratio = f0 / median
    folded = torch.where(ratio > 1.7, f0 / 2.0, torch.where((ratio < 0.59) & (f0 > 0), f0 * 2.0, f0))
    return folded


def _smooth(f0: torch.Tensor) -> torch.Tensor:
    """Median filter over voiced neighbours; an unvoiced frame stays unvoiced."""
    half = _MEDIAN_FRAMES // 2
    padded = F.pad(f0, (half, half))
    windows = padded.unfold(-1, _MEDIAN_FRAMES, 1)
    masked = torch.where(windows > 0, windows, torch.full_like(windows, float("nan")))
    median = torch.nan_to_num(torch.nanmedian(masked, dim=-1).values, nan=0.0)
    return torch.where(f0 > 0, median, f0)
