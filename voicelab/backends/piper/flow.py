"""Residual coupling flow (WaveNet-style coupling layers), run in reverse: prior z_p -> posterior z.

Inference only: ``forward`` is the sampling (reverse) direction. Weight norm of the WN layers was
folded into plain weights by the exporter.
"""

from __future__ import annotations

import torch
from torch import nn

from voicelab.backends.piper.duration import Flip


class WN(nn.Module):
    """WaveNet-style stack: gated dilated convs with residual and skip outputs."""

    def __init__(self, channels: int, kernel_size: int, dilation_rate: int, n_layers: int, gin_channels: int) -> None:
        super().__init__()
        self.channels = channels
        dilations = [dilation_rate**i for i in range(n_layers)]
        self.in_layers = nn.ModuleList(
            nn.Conv1d(channels, 2 * channels, kernel_size, dilation=d, padding=(kernel_size * d - d) // 2)
            for d in dilations
        )
        # The last layer has no residual half: it only feeds the skip sum.
        self.res_skip_layers = nn.ModuleList(
            nn.Conv1d(channels, 2 * channels if i < n_layers - 1 else channels, 1) for i in range(n_layers)
        )
        self.cond_layer = nn.Conv1d(gin_channels, 2 * channels * n_layers, 1) if gin_channels else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor | None) -> torch.Tensor:
        c = self.channels
        cond = self.cond_layer(g) if self.cond_layer is not None and g is not None else None
        output = torch.zeros_like(x)
        for i, (in_layer, res_skip) in enumerate(zip(self.in_layers, self.res_skip_layers, strict=True)):
            h = in_layer(x)
            if cond is not None:
                h = h + cond[:, 2 * c * i : 2 * c * (i + 1)]
            acts = torch.tanh(h[:, :c]) * torch.sigmoid(h[:, c:])
            rs = res_skip(acts)
            if i < len(self.in_layers) - 1:
                x = (x + rs[:, :c]) * mask
                output = output + rs[:, c:]
            else:
                output = output + rs
        return output * mask


class ResidualCouplingLayer(nn.Module):
    """Mean-only affine coupling, reverse: x1 = x1 - m(x0)."""

    def __init__(
        self,
        channels: int,
        hidden_channels: int,
        kernel_size: int,
        dilation_rate: int,
        n_layers: int,
        gin_channels: int,
    ) -> None:
        super().__init__()
        self.half_channels = channels // 2
        self.pre = nn.Conv1d(self.half_channels, hidden_channels, 1)
        self.enc = WN(hidden_channels, kernel_size, dilation_rate, n_layers, gin_channels)
        self.post = nn.Conv1d(hidden_channels, self.half_channels, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor | None) -> torch.Tensor:
        x0, x1 = x[:, : self.half_channels], x[:, self.half_channels :]
        h = self.enc(self.pre(x0) * mask, mask, g)
        m = self.post(h) * mask
        return torch.cat([x0, (x1 - m) * mask], 1)


class ResidualCouplingBlock(nn.Module):
    """Normalising flow between prior and posterior latents, run prior -> posterior (reverse)."""

    def __init__(
        self,
        channels: int,
        hidden_channels: int,
        kernel_size: int,
        dilation_rate: int,
        n_layers: int,
        n_flows: int,
        gin_channels: int,
    ) -> None:
        super().__init__()
        self.flows = nn.ModuleList()
        for _ in range(n_flows):
            self.flows.append(
                ResidualCouplingLayer(channels, hidden_channels, kernel_size, dilation_rate, n_layers, gin_channels)
            )
            self.flows.append(Flip())

    def forward(self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor | None) -> torch.Tensor:
        for flow in reversed(self.flows):
            x = flow(x, mask, g)
        return x
