"""Style-conditioned normalisation and residual blocks shared by the prosody predictor and the decoder."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class ChannelNorm(nn.Module):
    """LayerNorm over channels of a [B, C, T] tensor (learned gamma/beta)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x.transpose(1, 2), x.shape[1:2], self.gamma, self.beta, 1e-5).transpose(1, 2)


class AdaIN1d(nn.Module):
    """Instance norm over time whose scale and shift come from the style: x [B, C, T], s [B, S] -> [B, C, T]."""

    def __init__(self, style_dim: int, channels: int) -> None:
        super().__init__()
        self.fc = nn.Linear(style_dim, channels * 2)

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        gamma, beta = self.fc(s)[:, :, None].chunk(2, dim=1)
        mean = x.mean(dim=2, keepdim=True)
        var = (x - mean).pow(2).mean(dim=2, keepdim=True)
        return (1 + gamma) * (x - mean) / torch.sqrt(var + 1e-5) + beta


class AdaLayerNorm(nn.Module):
    """LayerNorm over channels, styled: x [B, T, C], s [B, S] -> [B, T, C]."""

    def __init__(self, style_dim: int, channels: int) -> None:
        super().__init__()
        self.channels = channels
        self.fc = nn.Linear(style_dim, channels * 2)

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        gamma, beta = self.fc(s)[:, None, :].chunk(2, dim=2)
        return (1 + gamma) * F.layer_norm(x, (self.channels,), eps=1e-5) + beta


class AdainResBlk1d(nn.Module):
    """StyleTTS2's residual block: two styled convs (optionally doubling time), a 1x1 shortcut where widths differ.

    x [B, C_in, T], s [B, S] -> [B, C_out, T] (or 2T with ``upsample``).
    """

    def __init__(self, dim_in: int, dim_out: int, style_dim: int, upsample: bool = False) -> None:
        super().__init__()
        self.upsample = upsample
        self.norm1 = AdaIN1d(style_dim, dim_in)
        self.norm2 = AdaIN1d(style_dim, dim_out)
        self.conv1 = nn.Conv1d(dim_in, dim_out, 3, 1, 1)
        self.conv2 = nn.Conv1d(dim_out, dim_out, 3, 1, 1)
        self.pool = (
            nn.ConvTranspose1d(dim_in, dim_in, 3, stride=2, groups=dim_in, padding=1, output_padding=1)
            if upsample
            else None
        )
        self.conv1x1 = nn.Conv1d(dim_in, dim_out, 1, bias=False) if dim_in != dim_out else None

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        h = F.leaky_relu(self.norm1(x, s), 0.2)
        if self.pool is not None:
            h = self.pool(h)
        h = self.conv2(F.leaky_relu(self.norm2(self.conv1(h), s), 0.2))
        shortcut = F.interpolate(x, scale_factor=2.0, mode="nearest") if self.upsample else x
        if self.conv1x1 is not None:
            shortcut = self.conv1x1(shortcut)
        return (h + shortcut) / math.sqrt(2.0)
