"""Multi-band MelGAN generator and PQMF synthesis in PyTorch, inference only (TensorFlowTTS's Baker vocoder).

mel [B, F, n_mels] -> reflect-pad + conv(7) -> per stage: LeakyReLU -> transposed conv (upsample by s)
                   -> residual stacks (dilations 1, k, k^2, ...) -> LeakyReLU -> reflect-pad + conv(7)
                   -> tanh -> sub-band signals [B, n_bands, F * prod(s)]
                   -> PQMF synthesis (upsample by n_bands, 63-tap filter bank) -> waveform [B, F * hop]

Inside, signals are [B, C, 1, T] in channels-last memory and the Conv1d weights are applied as conv2d:
oneDNN runs these narrow, long convolutions several times faster that way than as conv1d.

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


def conv(x: torch.Tensor, layer: nn.Conv1d, dilation: int = 1) -> torch.Tensor:
    """A Conv1d's weights applied as conv2d to x [B, C, 1, T] channels-last (oneDNN is much faster so)."""
    weight = layer.weight.unsqueeze(2).contiguous(memory_format=torch.channels_last)
    return F.conv2d(x, weight, layer.bias, dilation=(1, dilation))


def reflect_pad(x: torch.Tensor, pad: int) -> torch.Tensor:
    """Reflect-pad the time axis of [B, C, 1, T] (edge sample not repeated), keeping the memory format."""
    if pad == 0:
        return x
    left, right = x[..., 1 : pad + 1].flip(-1), x[..., -pad - 1 : -1].flip(-1)
    return torch.cat([left, x, right], dim=-1)


class ReflectConv1d(nn.Conv1d):
    """Reflect-pad then a 'valid' conv, as MelGAN's TFReflectionPad1d + Conv1D: [B, C, 1, T] -> [B, C', 1, T]."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1) -> None:
        super().__init__(in_channels, out_channels, kernel_size, dilation=dilation)
        self.pad = (kernel_size - 1) // 2 * dilation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return conv(reflect_pad(x, self.pad), self, self.dilation[0])


class Upsample(nn.ConvTranspose1d):
    """Transposed conv, kernel 2s, stride s, cropped like TF's 'same': [B, C, 1, T] -> [B, C', 1, T*s]."""

    def __init__(self, in_channels: int, out_channels: int, scale: int) -> None:
        super().__init__(in_channels, out_channels, 2 * scale, stride=scale)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        weight = self.weight.unsqueeze(2).contiguous(memory_format=torch.channels_last)
        full = F.conv_transpose2d(x, weight, self.bias, stride=(1, self.scale))
        start = self.scale // 2  # TF puts floor((k - s) / 2) of the padding before
        return full[..., start : start + x.shape[-1] * self.scale]


class ResidualStack(nn.Module):
    """shortcut(x) + pointwise(lrelu(dilated(lrelu(x)))): [B, C, 1, T] -> [B, C, 1, T]."""

    def __init__(self, channels: int, kernel_size: int, dilation: int) -> None:
        super().__init__()
        self.dilated = ReflectConv1d(channels, channels, kernel_size, dilation)
        self.pointwise = nn.Conv1d(channels, channels, 1)
        self.shortcut = nn.Conv1d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dilated(F.leaky_relu(x, LEAKY_SLOPE))
        return conv(x, self.shortcut) + conv(F.leaky_relu(h, LEAKY_SLOPE), self.pointwise)


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
    """Sub-bands [B, n_bands, 1, T] -> waveform [B, T * n_bands]: upsampler (zero-stuffing), then the filter bank.

    The two stored kernels are applied as one polyphase conv at the sub-band rate: output phase p of
    sample n = n_bands * s + p is sum_k sum_d g[p, k, d] x_k[s + d], with g built from both kernels.
    Same result as upsampling then filtering at the full rate, with n_bands times less work.
    """

    def __init__(self, n_bands: int, taps: int) -> None:
        super().__init__()
        self.n_bands, self.taps = n_bands, taps
        self.upsample = nn.ConvTranspose1d(n_bands, n_bands, n_bands, stride=n_bands, bias=False)
        self.filter = nn.Conv1d(n_bands, 1, taps + 1, padding=taps // 2)

    def polyphase(self) -> tuple[torch.Tensor, int, int]:
        """(g [n_bands phases, n_bands bands, D], left pad, right pad) from the two stored kernels."""
        n, half = self.n_bands, self.taps // 2
        up, h = self.upsample.weight.float(), self.filter.weight[0].float()  # [k, c, r], [c, j]
        mixed = torch.einsum("cj,kcr->jkr", h, up)  # [J, bands k, upsampler tap r]
        j = torch.arange(h.shape[1], device=h.device)
        offsets = torch.stack([p + j - half for p in range(n)])  # [P, J]: index into the stuffed signal
        d = torch.div(offsets, n, rounding_mode="floor")  # sub-band sample offset
        d_min, d_max = int(d.min()), int(d.max())
        g = torch.zeros(n, n, d_max - d_min + 1, device=h.device)
        for p in range(n):
            contrib = mixed[j, :, offsets[p] - n * d[p]]  # [J, k]: tap r = offset mod n
            g[p].index_add_(1, d[p] - d_min, contrib.T)
        return g, -d_min, d_max

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, n_bands, 1, T] -> [B, T * n_bands]."""
        g, left, right = self.polyphase()
        phases = F.conv2d(F.pad(x, (left, right)), g.to(x.dtype).unsqueeze(2))  # [B, P, 1, T]
        wave = phases[:, :, 0].transpose(1, 2).reshape(x.shape[0], -1)
        assert self.filter.bias is not None
        return wave + self.filter.bias


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
        """mel [B, F, n_mels] -> waveform [B, F * hop]; inside, [B, C, 1, T] channels-last."""
        x = self.first_conv(mel.transpose(1, 2).unsqueeze(2).contiguous(memory_format=torch.channels_last))
        for stage in self.stages:
            x = stage(x)
        bands = torch.tanh(self.last_conv(F.leaky_relu(x, LEAKY_SLOPE)))
        return self.pqmf(bands)
