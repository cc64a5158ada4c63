"""The harmonic source and the short-time Fourier transforms around the ISTFTNet generator.

The reference graph (the int8 ONNX export) makes the source deterministic: no random initial phase and no additive
noise. Here both are injectable (``HarmonicSource.forward(..., noise=generator)``) for the sound upstream trains
with; without a generator the source matches the reference exactly.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from voicelab.backends.kokoro.config import SAMPLE_RATE


class HarmonicSource(nn.Module):
    """F0 per sample -> one excitation signal: sines at F0 x 1..9 merged by a linear layer and tanh.

    f0 [B, N] (Hz, N samples) -> [B, N] in (-1, 1).
    """

    def __init__(self, harmonics: int, upsample: int, voiced_hz: float = 10.0, amplitude: float = 0.1) -> None:
        super().__init__()
        self.upsample = upsample
        self.voiced_hz = voiced_hz
        self.amplitude = amplitude
        self.multiples: torch.Tensor
        self.register_buffer("multiples", torch.arange(1, harmonics + 2, dtype=torch.float32), persistent=False)
        self.l_linear = nn.Linear(harmonics + 1, 1)

    def forward(self, f0: torch.Tensor, noise: torch.Generator | None = None) -> torch.Tensor:
        rad = f0[:, :, None] * self.multiples / SAMPLE_RATE
        rad = (rad - torch.floor(rad)).transpose(1, 2)  # [B, H, N], cycles per sample
        if noise is not None:
            start = torch.rand(rad.shape[0], rad.shape[1], 1, generator=noise, device=noise.device)
            start[:, 0] = 0
            rad = rad + F.pad(start.to(rad.device), (0, rad.shape[2] - 1))
        coarse = F.interpolate(rad, scale_factor=1.0 / self.upsample, mode="linear")
        phase = torch.cumsum(coarse, dim=2) * (2 * torch.pi) * self.upsample
        sines = torch.sin(F.interpolate(phase, scale_factor=float(self.upsample), mode="linear"))
        voiced = (f0 > self.voiced_hz).to(f0.dtype)[:, None, :]
        sines = sines * self.amplitude * voiced
        if noise is not None:
            std = voiced * 0.003 + (1 - voiced) * self.amplitude / 3
            sines = sines + std * torch.randn(sines.shape, generator=noise, device=noise.device).to(sines.device)
        return torch.tanh(self.l_linear(sines.transpose(1, 2)))[:, :, 0]


class SourceSpectrum(nn.Module):
    """Magnitude and phase of the excitation: x [B, N] -> [B, n_fft + 2, N / hop + 1]."""

    def __init__(self, n_fft: int, hop: int) -> None:
        super().__init__()
        self.n_fft = n_fft
        self.hop = hop
        self.window: torch.Tensor
        self.register_buffer("window", torch.hann_window(n_fft), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        padded = F.pad(x[:, None], (self.n_fft // 2, self.n_fft // 2), mode="reflect")[:, 0]
        frames = padded.unfold(1, self.n_fft, self.hop) * self.window  # [B, frames, n_fft]
        spectrum = torch.fft.rfft(frames, dim=2)
        real, imag = spectrum.real, spectrum.imag
        magnitude = torch.sqrt(real * real + imag * imag)
        # the reference graph's atan(imag / real) in the left half-plane gives -pi where imag == 0 and real < 0
        angle = torch.atan2(imag, real)
        phase = torch.where((imag == 0) & (real < 0), -torch.pi, angle)
        return torch.cat([magnitude, phase], dim=2).transpose(1, 2)


class InverseSpectrum(nn.Module):
    """Overlap-add of magnitude and phase frames: [B, n_fft/2 + 1, F] twice -> [B, (F - 1) * hop].

    ``inverse_basis`` and ``window_sum`` are the reference graph's own constants (it normalises only the first
    ``n_fft`` samples by the window sum, and every sample by n_fft / hop); they are loaded with the weights.
    """

    def __init__(self, n_fft: int, hop: int) -> None:
        super().__init__()
        self.n_fft = n_fft
        self.hop = hop
        self.inverse_basis = nn.Parameter(torch.zeros(n_fft + 2, 1, n_fft), requires_grad=False)
        self.window_sum = nn.Parameter(torch.zeros(n_fft), requires_grad=False)

    def forward(self, magnitude: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
        bins = torch.cat([magnitude * torch.cos(phase), magnitude * torch.sin(phase)], dim=1)
        out = F.conv_transpose1d(bins, self.inverse_basis, stride=self.hop)[:, 0]
        head = min(out.shape[1], self.n_fft)
        window = self.window_sum[:head]
        norm = torch.where(window > torch.finfo(torch.float32).tiny, window, torch.ones_like(window))
        out = torch.cat([out[:, :head] / norm, out[:, head:]], dim=1) * (self.n_fft / self.hop)
        return out[:, self.n_fft // 2 : -(self.n_fft // 2)]
