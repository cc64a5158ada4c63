"""The log-mel front end HiFi-GAN V1 was trained on, in PyTorch (no torchaudio or librosa at run time).

As in the HiFi-GAN authors' ``meldataset.py``: 22.05 kHz, reflect-padded by (n_fft - hop) / 2 on each side, a
1024-point periodic Hann STFT every 256 samples without centring (so frame t covers samples 256 t - 384 ..
256 t + 640 and N samples give N / 256 frames), magnitude sqrt(re^2 + im^2 + 1e-9), Slaney-style mel filters
(80 bins, 0-8 kHz, area-normalised: librosa's defaults, ``encoder.mel_filterbank``), natural log floored at 1e-5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from voicelab.voice.encoder import mel_filterbank

MEL_RATE = 22050


@dataclass(frozen=True)
class MelGrid:
    """The vocoder's analysis: frame, hop and mel bins."""

    sample_rate: int = MEL_RATE
    n_fft: int = 1024
    hop: int = 256
    n_mels: int = 80
    f_max: float = 8000.0  # from 0 Hz

    @property
    def bins(self) -> int:
        return self.n_fft // 2 + 1


class MelFrontEnd:
    """STFT and log-mel of padded batches on one device; the filterbank is built once."""

    def __init__(self, device: torch.device | str, grid: MelGrid | None = None) -> None:
        self.grid = grid or MelGrid()
        self.device = torch.device(device)
        self.window = torch.hann_window(self.grid.n_fft, periodic=True, device=self.device)
        filters = mel_filterbank(self.grid.sample_rate, self.grid.n_fft, self.grid.n_mels, self.grid.f_max)
        self.basis = torch.from_numpy(filters).to(self.device)

    def stft(self, x: torch.Tensor) -> torch.Tensor:
        """Complex spectrum (B, T, bins) of (B, N), T = N // hop (the training framing)."""
        g = self.grid
        side = (g.n_fft - g.hop) // 2
        padded = F.pad(x.unsqueeze(1), (side, side), mode="reflect").squeeze(1)
        spec = torch.stft(padded, g.n_fft, g.hop, window=self.window, center=False, onesided=True, return_complex=True)
        return spec.transpose(1, 2)

    def log_mel(self, magnitude: torch.Tensor) -> torch.Tensor:
        """(B, T, bins) magnitudes -> the vocoder's input (B, n_mels, T)."""
        return torch.log(torch.matmul(magnitude, self.basis.T).clamp_min(1e-5)).transpose(1, 2)

    def of_audio(self, x: torch.Tensor) -> torch.Tensor:
        """Log-mel (B, n_mels, T) of (B, N) at the grid's rate."""
        spec = self.stft(x)
        return self.log_mel(torch.sqrt(spec.real.square() + spec.imag.square() + 1e-9))


def resample_rows(x: torch.Tensor, rate_in: int, rate_out: int) -> torch.Tensor:
    """(B, N) at ``rate_in`` -> (B, round(N * rate_out / rate_in)) by zero-padding or cutting the spectrum.

    Whole rows at once on their own device: the renderer needs 22.05 kHz for the vocoder and hands back the
    caller's rate (the match search runs at 16 kHz). Rows are padded by a short reflection first so that the
    FFT's circular wrap does not click at the ends; the pad is a whole number of samples at both rates (20 ms
    between 16 and 22.05 kHz), so the output's samples fall exactly on the input's time grid.
    """
    if rate_in == rate_out:
        return x
    n = x.shape[-1]
    n_out = round(n * rate_out / rate_in)
    unit = rate_in // math.gcd(rate_in, rate_out)
    pad = unit if unit < n else 0
    padded = F.pad(x.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1) if pad > 0 else x
    total = padded.shape[-1]
    total_out = round(total * rate_out / rate_in)
    spectrum = torch.fft.rfft(padded, dim=-1)
    keep = min(spectrum.shape[-1], total_out // 2 + 1)
    out_spec = torch.zeros(*spectrum.shape[:-1], total_out // 2 + 1, dtype=spectrum.dtype, device=x.device)
    out_spec[..., :keep] = spectrum[..., :keep]
    out = torch.fft.irfft(out_spec, total_out, dim=-1) * (total_out / total)
    start = pad * rate_out // rate_in
    return out[..., start : start + n_out]
