"""Stochastic duration predictor, run in reverse: noise [B, 2, T] -> log durations [B, 1, T].

Inference only: every flow's ``forward`` is the sampling (reverse) direction. The spline is
evaluated for all positions at once (no boolean indexing) and is kept in float32 by the model.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

MIN_BIN_WIDTH = 1e-3
MIN_BIN_HEIGHT = 1e-3
MIN_DERIVATIVE = 1e-3


class LayerNorm(nn.Module):
    """LayerNorm over the channel axis of [B, C, T] tensors (VITS keeps gamma/beta names)."""

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.layer_norm(x.transpose(1, 2), (x.shape[1],), self.gamma, self.beta, self.eps)
        return y.transpose(1, 2)


class DDSConv(nn.Module):
    """Dilated depth-separable convs (dilation kernel_size**i), LayerNorm + GELU, residual."""

    def __init__(self, channels: int, kernel_size: int, n_layers: int) -> None:
        super().__init__()
        dilations = [kernel_size**i for i in range(n_layers)]
        self.convs_sep = nn.ModuleList(
            nn.Conv1d(channels, channels, kernel_size, groups=channels, dilation=d, padding=(kernel_size * d - d) // 2)
            for d in dilations
        )
        self.convs_1x1 = nn.ModuleList(nn.Conv1d(channels, channels, 1) for _ in dilations)
        self.norms_1 = nn.ModuleList(LayerNorm(channels) for _ in dilations)
        self.norms_2 = nn.ModuleList(LayerNorm(channels) for _ in dilations)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor | None = None) -> torch.Tensor:
        if g is not None:
            x = x + g
        for sep, norm_1, conv, norm_2 in zip(self.convs_sep, self.norms_1, self.convs_1x1, self.norms_2, strict=True):
            y = F.gelu(norm_1(sep(x * mask)))
            y = F.gelu(norm_2(conv(y)))
            x = x + y
        return x * mask


def inverse_rational_quadratic_spline(
    y: torch.Tensor, widths: torch.Tensor, heights: torch.Tensor, derivatives: torch.Tensor, tail_bound: float
) -> torch.Tensor:
    """Invert a monotonic rational-quadratic spline on [-B, B] with linear (identity) tails.

    y [...]; widths/heights [..., K] and inner derivatives [..., K-1] are unnormalised.
    """
    num_bins = widths.shape[-1]
    edge = math.log(math.exp(1 - MIN_DERIVATIVE) - 1)  # softplus(edge) + min = 1: slope 1 at the bounds
    derivatives = F.pad(derivatives, (1, 1), value=edge)
    derivatives = MIN_DERIVATIVE + F.softplus(derivatives)
    cumwidths, widths = _bins(widths, MIN_BIN_WIDTH, num_bins, tail_bound)
    cumheights, heights = _bins(heights, MIN_BIN_HEIGHT, num_bins, tail_bound)

    inside = (y >= -tail_bound) & (y <= tail_bound)
    y_in = y.clamp(-tail_bound, tail_bound)
    # Bin search as VITS does it: the top edge is nudged up so y == top lands in the last bin.
    edges = torch.cat([cumheights[..., :-1], cumheights[..., -1:] + 1e-6], dim=-1)
    idx = ((y_in.unsqueeze(-1) >= edges).sum(dim=-1, keepdim=True) - 1).clamp(0, num_bins - 1)

    x_k = cumwidths.gather(-1, idx).squeeze(-1)
    w_k = widths.gather(-1, idx).squeeze(-1)
    y_k = cumheights.gather(-1, idx).squeeze(-1)
    h_k = heights.gather(-1, idx).squeeze(-1)
    d_k = derivatives.gather(-1, idx).squeeze(-1)
    d_k1 = derivatives[..., 1:].gather(-1, idx).squeeze(-1)
    delta = h_k / w_k

    dy = y_in - y_k
    slope_sum = d_k + d_k1 - 2 * delta
    a = dy * slope_sum + h_k * (delta - d_k)
    b = h_k * d_k - dy * slope_sum
    c = -delta * dy
    discriminant = (b.pow(2) - 4 * a * c).clamp_min(0)
    theta = (2 * c) / (-b - torch.sqrt(discriminant))
    x = theta * w_k + x_k
    return torch.where(inside, x, y)


def _bins(
    unnormalized: torch.Tensor, min_size: float, num_bins: int, bound: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax bin sizes with a floor -> (edges [..., K+1] from -bound to bound, sizes [..., K])."""
    sizes = min_size + (1 - min_size * num_bins) * F.softmax(unnormalized, dim=-1)
    cum = F.pad(torch.cumsum(sizes, dim=-1), (1, 0))
    cum = 2 * bound * cum - bound
    cum = torch.cat([torch.full_like(cum[..., :1], -bound), cum[..., 1:-1], torch.full_like(cum[..., :1], bound)], -1)
    return cum, cum[..., 1:] - cum[..., :-1]


class ConvFlow(nn.Module):
    """Coupling flow: x0 conditions a spline that transforms x1 (2 channels in, 2 out)."""

    def __init__(self, channels: int, filter_channels: int, kernel_size: int, num_bins: int, tail_bound: float) -> None:
        super().__init__()
        self.half_channels = channels // 2
        self.num_bins = num_bins
        self.tail_bound = tail_bound
        self.filter_channels = filter_channels
        self.pre = nn.Conv1d(self.half_channels, filter_channels, 1)
        self.convs = DDSConv(filter_channels, kernel_size, n_layers=3)
        self.proj = nn.Conv1d(filter_channels, self.half_channels * (num_bins * 3 - 1), 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        x0, x1 = x[:, : self.half_channels], x[:, self.half_channels :]
        h = self.proj(self.convs(self.pre(x0), mask, g=g)) * mask
        b, c, t = x0.shape
        h = h.reshape(b, c, -1, t).permute(0, 1, 3, 2)  # [B, c, T, 3K-1]
        k, scale = self.num_bins, math.sqrt(self.filter_channels)
        x1 = inverse_rational_quadratic_spline(
            x1, h[..., :k] / scale, h[..., k : 2 * k] / scale, h[..., 2 * k :], self.tail_bound
        )
        return torch.cat([x0, x1], 1) * mask


class ElementwiseAffine(nn.Module):
    """Per-channel affine map; reverse: (x - m) * exp(-logs)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.m = nn.Parameter(torch.zeros(channels, 1))
        self.logs = nn.Parameter(torch.zeros(channels, 1))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return (x - self.m) * torch.exp(-self.logs) * mask


class Flip(nn.Module):
    """Swaps the channel order so the next coupling layer transforms the other half."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor | None = None) -> torch.Tensor:
        return torch.flip(x, [1])


class StochasticDurationPredictor(nn.Module):
    """Text hidden states [B, H, T] + noise -> log durations [B, 1, T]."""

    def __init__(
        self, in_channels: int, kernel_size: int, n_flows: int, num_bins: int, tail_bound: float, gin_channels: int
    ) -> None:
        super().__init__()
        channels = in_channels  # VITS ties filter_channels to in_channels here
        self.pre = nn.Conv1d(in_channels, channels, 1)
        self.convs = DDSConv(channels, kernel_size, n_layers=3)
        self.proj = nn.Conv1d(channels, channels, 1)
        self.cond = nn.Conv1d(gin_channels, channels, 1) if gin_channels else None
        # flows[1], a ConvFlow, is never used when sampling; exports drop its weights, so an Identity
        # keeps the numbering of the rest (flows.3, flows.5, ... as in the checkpoint).
        flows: list[nn.Module] = [ElementwiseAffine(2), nn.Identity(), Flip()]
        for _ in range(n_flows - 1):
            flows += [ConvFlow(2, channels, kernel_size, num_bins, tail_bound), Flip()]
        self.flows = nn.ModuleList(flows)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, noise: torch.Tensor, g: torch.Tensor | None = None
    ) -> torch.Tensor:
        """noise [B, 2, T] (already scaled by noise_w) -> logw [B, 1, T]."""
        x = self.pre(x)
        if self.cond is not None and g is not None:
            x = x + self.cond(g)
        x = self.proj(self.convs(x, mask)) * mask
        z = noise
        for flow in reversed(self.flows[2:]):
            z = flow(z, mask, x)
        z = self.flows[0](z, mask, x)
        return z[:, :1]
