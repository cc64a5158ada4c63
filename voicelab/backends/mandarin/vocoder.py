"""Multi-band MelGAN generator and PQMF synthesis in PyTorch, inference only (TensorFlowTTS's Baker vocoder).

mel [B, F, n_mels] -> reflect-pad + conv(7) -> per stage: LeakyReLU -> transposed conv (upsample by s)
                   -> residual stacks (dilations 1, k, k^2, ...) -> LeakyReLU -> reflect-pad + conv(7)
                   -> tanh -> sub-band signals [B, n_bands, F * prod(s)]
                   -> PQMF synthesis (upsample by n_bands, 63-tap filter bank) -> waveform [B, F * hop]

The converter folded some residual stacks' pointwise-conv bias into the shortcut's (both are added to
the same sum); those pointwise convs load the op's zero bias. The PQMF filters are read from the file too.
The Baker data is licensed for non-commercial use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

LEAKY_SLOPE = 0.2


@dataclass(frozen=True)
class MelGANDims:
    """Sizes of the generator; read from the weights (see weights.infer_melgan_dims)."""

    n_mels: int
    channels: int  # after the first conv; halved by every upsampling stage
    kernel_size: int  # first and last conv
    upsample_scales: tuple[int, ...]
    stacks: int  # residual stacks per stage
    stack_kernel: int
    n_bands: int
    pqmf_taps: int  # synthesis filter length is taps + 1

    @property
    def hop_length(self) -> int:
        return math.prod(self.upsample_scales) * self.n_bands


class ReflectConv1d(nn.Conv1d):
    """Reflect-pad then a 'valid' conv, as MelGAN's TFReflectionPad1d + Conv1D: [B, C, T] -> [B, C', T]."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1) -> None:
        super().__init__(in_channels, out_channels, kernel_size, dilation=dilation)
        self.pad = (kernel_size - 1) // 2 * dilation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, (self.pad, self.pad), mode="reflect"))


class Upsample(nn.ConvTranspose1d):
    """Transposed conv with kernel 2s and stride s, cropped like TF's 'same' padding: [B, C, T] -> [B, C', T*s]."""

    def __init__(self, in_channels: int, out_channels: int, scale: int) -> None:
        super().__init__(in_channels, out_channels, 2 * scale, stride=scale)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        full = super().forward(x)
        start = self.scale // 2  # TF puts floor((k - s) / 2) of the padding before
        return full[..., start : start + x.shape[-1] * self.scale]


class ResidualStack(nn.Module):
    """shortcut(x) + pointwise(lrelu(dilated(lrelu(x)))): [B, C, T] -> [B, C, T]."""

    def __init__(self, channels: int, kernel_size: int, dilation: int) -> None:
        super().__init__()
        self.dilated = ReflectConv1d(channels, channels, kernel_size, dilation)
        self.pointwise = nn.Conv1d(channels, channels, 1)
        self.shortcut = nn.Conv1d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dilated(F.leaky_relu(x, LEAKY_SLOPE))
        return self.shortcut(x) + self.pointwise(F.leaky_relu(h, LEAKY_SLOPE))


class UpsampleStage(nn.Module):
    """LeakyReLU -> Upsample -> residual stacks with dilations kernel^j."""

    def __init__(self, in_channels: int, out_channels: int, scale: int, stacks: int, stack_kernel: int) -> None:
        super().__init__()
        self.upsample = Upsample(in_channels, out_channels, scale)
        self.stacks = nn.ModuleList(ResidualStack(out_channels, stack_kernel, stack_kernel**j) for j in range(stacks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.upsample(F.leaky_relu(x, LEAKY_SLOPE))
        for stack in self.stacks:
            x = stack(x)
        return x


class PQMFSynthesis(nn.Module):
    """Sub-bands [B, n_bands, T] -> waveform [B, 1, T * n_bands]: zero-stuffing upsampler, then the filter bank."""

    def __init__(self, n_bands: int, taps: int) -> None:
        super().__init__()
        self.upsample = nn.ConvTranspose1d(n_bands, n_bands, n_bands, stride=n_bands, bias=False)
        self.filter = nn.Conv1d(n_bands, 1, taps + 1, padding=taps // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.filter(self.upsample(x))


class MultiBandMelGAN(nn.Module):
    """Normalised log-mel [B, F, n_mels] -> waveform [B, F * hop]. Built from MelGANDims."""

    def __init__(self, dims: MelGANDims) -> None:
        super().__init__()
        self.dims = d = dims
        self.first_conv = ReflectConv1d(d.n_mels, d.channels, d.kernel_size)
        widths = [d.channels // 2**i for i in range(len(d.upsample_scales) + 1)]
        self.stages = nn.ModuleList(
            UpsampleStage(widths[i], widths[i + 1], scale, d.stacks, d.stack_kernel)
            for i, scale in enumerate(d.upsample_scales)
        )
        self.last_conv = ReflectConv1d(widths[-1], d.n_bands, d.kernel_size)
        self.pqmf = PQMFSynthesis(d.n_bands, d.pqmf_taps)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = self.first_conv(mel.transpose(1, 2))
        for stage in self.stages:
            x = stage(x)
        bands = torch.tanh(self.last_conv(F.leaky_relu(x, LEAKY_SLOPE)))
        return self.pqmf(bands)[:, 0]
