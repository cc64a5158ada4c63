"""HiFi-GAN generator: latent frames z [B, C, T] -> waveform [B, 1, T * hop] (inference only).

Weight norm was folded into plain weights when the voice was exported, so every layer is a plain conv.
Batched inputs carry a frame mask: every conv input is zeroed past an item's length, which reproduces
exactly the zero padding an item sees when it is run on its own. On CPU the signal travels as
[B, C, 1, T] in channels-last memory (see Conv1d and Upsample); elsewhere as plain [B, C, T].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

LRELU_SLOPE = 0.1


class Conv1d(nn.Conv1d):
    """nn.Conv1d that also takes a signal as [B, C, 1, T] in channels-last memory.

    oneDNN (PyTorch's CPU convolutions) runs the decoder's long, narrow convolutions up to twice as
    fast in that layout; the weights and the arithmetic are the same.
    """

    def __init__(
        self, in_ch: int, out_ch: int, kernel_size: int, dilation: int = 1, padding: int = 0, bias: bool = True
    ) -> None:
        super().__init__(in_ch, out_ch, kernel_size, dilation=dilation, padding=padding, bias=bias)
        self.padding_2d, self.dilation_2d = (0, padding), (1, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 3:
            return super().forward(x)
        return F.conv2d(x, self.weight.unsqueeze(2), self.bias, padding=self.padding_2d, dilation=self.dilation_2d)


def _padding(kernel_size: int, dilation: int) -> int:
    return (kernel_size * dilation - dilation) // 2


def _masked(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return x if mask is None else x * mask


class ResBlock1(nn.Module):
    """Pairs of (dilated conv, plain conv) with residuals; used by Piper's "high" voices."""

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(
            Conv1d(channels, channels, kernel_size, dilation=d, padding=_padding(kernel_size, d)) for d in dilations
        )
        self.convs2 = nn.ModuleList(
            Conv1d(channels, channels, kernel_size, padding=_padding(kernel_size, 1)) for _ in dilations
        )

    def forward(self, x: torch.Tensor, x_act: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """x [B, C, (1,) T] and its activation leaky_relu(x), shared by the resblocks of a stage, masked."""
        for i, (conv1, conv2) in enumerate(zip(self.convs1, self.convs2, strict=True)):
            act = x_act if i == 0 else _masked(F.leaky_relu(x, LRELU_SLOPE), mask)
            xt = conv1(act)
            xt = conv2(_masked(F.leaky_relu(xt, LRELU_SLOPE, inplace=True), mask))
            x = xt.add_(x)
        return x


class ResBlock2(nn.Module):
    """Dilated convs with residuals; used by Piper's "x_low", "low" and "medium" voices."""

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            Conv1d(channels, channels, kernel_size, dilation=d, padding=_padding(kernel_size, d)) for d in dilations
        )

    def forward(self, x: torch.Tensor, x_act: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """x [B, C, (1,) T] and its activation leaky_relu(x), shared by the resblocks of a stage, masked."""
        for i, conv in enumerate(self.convs):
            act = x_act if i == 0 else _masked(F.leaky_relu(x, LRELU_SLOPE), mask)
            x = conv(act).add_(x)
        return x


class Upsample(nn.ConvTranspose1d):
    """A transposed conv computed as ``stride`` ordinary convs (one per output phase), then interleaved.

    Same weights and result as nn.ConvTranspose1d; on CPU PyTorch's transposed conv is a slow
    col2im path, while the polyphase form runs as one fast conv. Used when out = in * stride.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int, padding: int) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding=padding)
        fits = kernel_size - 2 * padding == stride and kernel_size % stride == 0
        self.polyphase = (kernel_size, stride, padding) if fits else None

    def forward(self, x: torch.Tensor, output_size: list[int] | None = None) -> torch.Tensor:
        if x.device.type != "cpu" or self.polyphase is None:
            return super().forward(x, output_size)
        kernel, stride, padding = self.polyphase
        weight, left = self._phase_weights(stride, padding, kernel)
        bias = None if self.bias is None else self.bias.repeat(stride)
        taps = weight.shape[-1]
        x = F.pad(x, (left, taps - 1 - left))
        if x.dim() == 3:
            y = F.conv1d(x, weight, bias)  # [B, stride * C_out, T]
            b, _, t = y.shape
            return y.view(b, stride, -1, t).permute(0, 2, 3, 1).reshape(b, -1, t * stride)
        y = F.conv2d(x, weight.unsqueeze(2), bias)  # [B, stride * C_out, 1, T], channels-last
        b, _, _, t = y.shape
        # In channels-last memory the phases of one frame are already adjacent: interleaving is a view.
        out = y.permute(0, 2, 3, 1).reshape(b, 1, t * stride, -1).permute(0, 3, 1, 2)
        return out

    def _phase_weights(self, stride: int, padding: int, kernel: int) -> tuple[torch.Tensor, int]:
        """[stride * C_out, C_in, taps] conv weights; output phase r uses kernel taps j = d*stride + (r+p) % stride."""
        per_phase = kernel // stride
        shifts = [(r + padding) // stride for r in range(stride)]  # input offset of each phase
        left = per_phase - 1 - min(shifts)
        taps = max(shifts) + left + 1
        w = self.weight.transpose(0, 1)  # [C_out, C_in, K]
        phases = w.new_zeros(stride, w.shape[0], w.shape[1], taps)
        for r, shift in enumerate(shifts):
            for d in range(per_phase):
                phases[r, :, :, shift - d + left] = w[:, :, d * stride + (r + padding) % stride]
        return phases.reshape(stride * w.shape[0], w.shape[1], taps), left


RESBLOCKS: dict[str, type[ResBlock1 | ResBlock2]] = {"1": ResBlock1, "2": ResBlock2}


class Generator(nn.Module):
    """conv_pre -> [leaky ReLU, transposed-conv upsample, mean of resblocks] per stage -> conv_post -> tanh."""

    def __init__(
        self,
        in_channels: int,
        resblock: str,
        resblock_kernel_sizes: tuple[int, ...],
        resblock_dilation_sizes: tuple[tuple[int, ...], ...],
        upsample_rates: tuple[int, ...],
        upsample_initial_channel: int,
        upsample_kernel_sizes: tuple[int, ...],
        gin_channels: int,
    ) -> None:
        super().__init__()
        self.upsample_rates = upsample_rates
        self.num_kernels = len(resblock_kernel_sizes)
        self.conv_pre = Conv1d(in_channels, upsample_initial_channel, 7, padding=3)
        self.ups = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        channels = upsample_initial_channel
        for rate, kernel in zip(upsample_rates, upsample_kernel_sizes, strict=True):
            self.ups.append(Upsample(channels, channels // 2, kernel, rate, (kernel - rate) // 2))
            channels //= 2
            for k, dilations in zip(resblock_kernel_sizes, resblock_dilation_sizes, strict=True):
                self.resblocks.append(RESBLOCKS[resblock](channels, k, dilations))
        self.conv_post = Conv1d(channels, 1, 7, padding=3, bias=False)
        self.cond = nn.Conv1d(gin_channels, upsample_initial_channel, 1) if gin_channels else None

    def forward(self, z: torch.Tensor, frame_mask: torch.Tensor | None, g: torch.Tensor | None) -> torch.Tensor:
        """z [B, C, T] (zero past each length), frame_mask [B, 1, T] or None -> audio [B, 1, T * hop]."""
        x = self.conv_pre(_channels_last(z))
        if self.cond is not None and g is not None:
            x = x + _channels_last(self.cond(g))
        mask = frame_mask if frame_mask is None or x.dim() == 3 else frame_mask.unsqueeze(2)
        for i, (rate, up) in enumerate(zip(self.upsample_rates, self.ups, strict=True)):
            x = up(_masked(F.leaky_relu(x, LRELU_SLOPE, inplace=True), mask))
            if mask is not None:
                mask = mask.repeat_interleave(rate, dim=-1)
            x_act = _masked(F.leaky_relu(x, LRELU_SLOPE), mask)
            blocks = self.resblocks[i * self.num_kernels : (i + 1) * self.num_kernels]
            total = blocks[0](x, x_act, mask)
            for block in blocks[1:]:
                total = total.add_(block(x, x_act, mask))
            x = total.div_(self.num_kernels)
        # The last activation uses PyTorch's default slope (0.01), as in the trained model.
        x = self.conv_post(_masked(F.leaky_relu(x, inplace=True), mask))
        return torch.tanh_(x).reshape(x.shape[0], 1, -1)


def _channels_last(x: torch.Tensor) -> torch.Tensor:
    """On CPU, [B, C, T] -> [B, C, 1, T] in channels-last memory (see Conv1d); elsewhere unchanged."""
    if x.device.type != "cpu":
        return x
    return x.unsqueeze(2).contiguous(memory_format=torch.channels_last)
