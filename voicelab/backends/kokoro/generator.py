"""The ISTFTNet generator: upsampling convs with snake-activated styled resblocks, fed by the harmonic source."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from voicelab.backends.kokoro.blocks import AdaIN1d
from voicelab.backends.kokoro.config import KokoroDims
from voicelab.backends.kokoro.source import HarmonicSource, InverseSpectrum, SourceSpectrum


class SnakeResBlock(nn.Module):
    """Three dilated styled conv pairs with snake activations: x [B, C, T], s [B, 128] -> [B, C, T]."""

    def __init__(self, channels: int, kernel: int, dilations: tuple[int, ...], style_dim: int) -> None:
        super().__init__()

        def conv(dilation: int) -> nn.Conv1d:
            return nn.Conv1d(channels, channels, kernel, dilation=dilation, padding=(kernel * dilation - dilation) // 2)

        self.convs1 = nn.ModuleList(conv(d) for d in dilations)
        self.convs2 = nn.ModuleList(conv(1) for _ in dilations)
        self.adain1 = nn.ModuleList(AdaIN1d(style_dim, channels) for _ in dilations)
        self.adain2 = nn.ModuleList(AdaIN1d(style_dim, channels) for _ in dilations)
        self.alpha1 = nn.ParameterList(nn.Parameter(torch.ones(1, channels, 1)) for _ in dilations)
        self.alpha2 = nn.ParameterList(nn.Parameter(torch.ones(1, channels, 1)) for _ in dilations)

    @staticmethod
    def snake(x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        return x + (1 / alpha) * torch.sin(alpha * x) ** 2

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        for c1, c2, n1, n2, a1, a2 in zip(
            self.convs1, self.convs2, self.adain1, self.adain2, self.alpha1, self.alpha2, strict=True
        ):
            h = c1(self.snake(n1(x, s), a1))
            x = x + c2(self.snake(n2(h, s), a2))
        return x


class Generator(nn.Module):
    """Decoder features [B, 512, 2F], s [B, 128], F0 [B, 2F] -> waveform [B, 600 F]."""

    def __init__(self, dims: KokoroDims) -> None:
        super().__init__()
        self.kernels = len(dims.resblock_kernels)
        self.f0_upsample = math.prod(dims.upsample_rates) * dims.hop
        self.m_source = HarmonicSource(dims.harmonics, self.f0_upsample)
        self.source_spectrum = SourceSpectrum(dims.n_fft, dims.hop)
        self.ups = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        self.noise_convs = nn.ModuleList()
        self.noise_res = nn.ModuleList()
        channels = dims.upsample_channels
        for i, (rate, kernel) in enumerate(zip(dims.upsample_rates, dims.upsample_kernels, strict=True)):
            channels //= 2
            self.ups.append(nn.ConvTranspose1d(channels * 2, channels, kernel, rate, padding=(kernel - rate) // 2))
            for k in dims.resblock_kernels:
                self.resblocks.append(SnakeResBlock(channels, k, dims.resblock_dilations, dims.style))
            later = math.prod(dims.upsample_rates[i + 1 :])
            if i + 1 < len(dims.upsample_rates):
                self.noise_convs.append(
                    nn.Conv1d(dims.n_fft + 2, channels, later * 2, stride=later, padding=(later + 1) // 2)
                )
                self.noise_res.append(SnakeResBlock(channels, 7, dims.resblock_dilations, dims.style))
            else:
                self.noise_convs.append(nn.Conv1d(dims.n_fft + 2, channels, 1))
                self.noise_res.append(SnakeResBlock(channels, 11, dims.resblock_dilations, dims.style))
        self.conv_post = nn.Conv1d(channels, dims.n_fft + 2, 7, padding=3)
        self.bins = dims.n_fft // 2 + 1
        self.stft = InverseSpectrum(dims.n_fft, dims.hop)

    def forward(
        self, x: torch.Tensor, s: torch.Tensor, f0: torch.Tensor, noise: torch.Generator | None = None
    ) -> torch.Tensor:
        with torch.no_grad():  # as upstream: the source's phase has no useful gradient (atan2, sqrt at zero)
            f0_samples = f0.repeat_interleave(self.f0_upsample, dim=1)
            harmonics = self.source_spectrum(self.m_source(f0_samples, noise))
        for i, up in enumerate(self.ups):
            x = F.leaky_relu(x, 0.1)
            source = self.noise_res[i](self.noise_convs[i](harmonics), s)
            x = up(x)
            if i == len(self.ups) - 1:
                x = F.pad(x, (1, 0), mode="reflect")
            x = x + source
            blocks = self.resblocks[i * self.kernels : (i + 1) * self.kernels]
            x = torch.stack([block(x, s) for block in blocks]).mean(dim=0)
        x = self.conv_post(F.leaky_relu(x, 0.01))
        return self.stft(torch.exp(x[:, : self.bins]), torch.sin(x[:, self.bins :]))
