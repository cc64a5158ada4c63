"""The HiFT vocoder's short STFT and its inverse as one matmul and one transposed convolution, with no host sync.

CosyVoice's HiFT ends in a 16-point inverse STFT (hop 4) and reads its excitation through a 16-point STFT. Upstream
calls ``torch.istft``, which checks the window's overlap-add envelope on the host (``.item()``: a sync that waits for
every kernel queued on the stream, and that no CUDA graph capture can hold), and both go through cuFFT for frames of
16 samples. Here the forward transform is the windowed frames times a (16, 18) DFT basis, and the inverse one
transposed convolution whose kernels are the windowed inverse-DFT basis (the overlap-add is the convolution's own),
divided by the window's overlap-add envelope. The same framing as upstream's calls (centred, reflect padding, a
one-sided spectrum whose DC and Nyquist imaginary parts are ignored), equal to ``torch.stft``/``torch.istft`` within
float32 rounding (``tests/test_hift_stft.py``)."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F


def dft_basis(window: torch.Tensor) -> torch.Tensor:
    """(n_fft, 2 * bins): the windowed forward DFT, real parts then imaginary parts (``exp(-i...)``)."""
    n_fft = int(window.shape[0])
    bins = n_fft // 2 + 1
    angle = _angles(n_fft, bins, window.device)
    w = window.to(torch.float64).unsqueeze(1)
    return torch.cat([w * torch.cos(angle), -w * torch.sin(angle)], dim=1).to(window.dtype)


def inverse_basis(window: torch.Tensor) -> torch.Tensor:
    """(2 * bins, 1, n_fft): transposed-convolution kernels that turn each bin's real and imaginary part into its
    windowed share of the frame (an inverse real DFT: interior bins count twice, DC and Nyquist once, their imaginary
    parts not at all, as ``irfft`` ignores them)."""
    n_fft = int(window.shape[0])
    bins = n_fft // 2 + 1
    angle = _angles(n_fft, bins, window.device).T  # (bins, n_fft)
    weight = torch.full((bins, 1), 2.0, dtype=torch.float64, device=window.device)
    weight[0] = 1.0
    if n_fft % 2 == 0:
        weight[-1] = 1.0
    w = window.to(torch.float64).unsqueeze(0) / n_fft
    real, imag = weight * torch.cos(angle) * w, -weight * torch.sin(angle) * w
    imag[0] = 0.0
    if n_fft % 2 == 0:
        imag[-1] = 0.0
    return torch.cat([real, imag], dim=0).unsqueeze(1).to(window.dtype)


def _angles(n_fft: int, bins: int, device: torch.device) -> torch.Tensor:
    """(n_fft, bins): 2 pi k n / n_fft in float64 (the bases are rounded to float32 once, at the end)."""
    n = torch.arange(n_fft, dtype=torch.float64, device=device).unsqueeze(1)
    k = torch.arange(bins, dtype=torch.float64, device=device).unsqueeze(0)
    return 2.0 * math.pi * n * k / n_fft


class HiftStft:
    """``_stft`` and ``_istft`` for one HiFT instance (its window, ``n_fft`` and hop), bases made once."""

    def __init__(self, window: torch.Tensor, hop: int) -> None:
        self.window = window
        self.n_fft = int(window.shape[0])
        self.hop = hop
        self.forward_basis = dft_basis(window)
        self.inverse_kernels = inverse_basis(window)
        self.envelope_kernel = (window * window).reshape(1, 1, -1)

    def stft(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch, samples) -> real and imaginary parts, each (batch, bins, frames): ``torch.stft`` centred with
        reflect padding, as HiFT's ``_stft`` calls it."""
        half = self.n_fft // 2
        padded = F.pad(x.unsqueeze(1), (half, half), mode="reflect").squeeze(1)
        frames = padded.unfold(-1, self.n_fft, self.hop)  # (batch, frames, n_fft)
        spectrum = torch.matmul(frames, self.forward_basis).transpose(1, 2)  # (batch, 2 * bins, frames)
        bins = self.n_fft // 2 + 1
        return spectrum[:, :bins], spectrum[:, bins:]

    def istft(self, magnitude: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
        """HiFT's ``_istft``: the magnitude clipped at 100, then ``torch.istft`` of ``magnitude * exp(i phase)``
        (centred: ``hop * (frames - 1)`` samples), without its host-side envelope check."""
        magnitude = torch.clip(magnitude, max=1e2)
        parts = torch.cat([magnitude * torch.cos(phase), magnitude * torch.sin(phase)], dim=1)
        summed = F.conv_transpose1d(parts, self.inverse_kernels, stride=self.hop).squeeze(1)
        frames = int(parts.shape[-1])
        ones = torch.ones(1, 1, frames, dtype=parts.dtype, device=parts.device)
        envelope = F.conv_transpose1d(ones, self.envelope_kernel, stride=self.hop).reshape(-1)
        half = self.n_fft // 2
        end = half + self.hop * (frames - 1)
        return summed[:, half:end] / envelope[half:end]


def make_sync_free(hift: Any) -> HiftStft | None:
    """Give a HiFT instance (upstream's ``HiFTGenerator`` or its causal subclass) these ``_stft`` and ``_istft``
    as instance attributes, its window on its own device; None (nothing changed) where it has no such window."""
    window = getattr(hift, "stft_window", None)
    params = getattr(hift, "istft_params", None)
    if not isinstance(window, torch.Tensor) or not isinstance(params, dict) or "hop_len" not in params:
        return None
    device = next(hift.parameters()).device
    transforms = HiftStft(window.to(device=device, dtype=torch.float32), int(params["hop_len"]))
    hift._stft = transforms.stft
    hift._istft = transforms.istft
    return transforms
