"""The acoustic text encoder (embedding, three conv layers, a BiLSTM) and the prosody predictor."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from voicelab.backends.kokoro.blocks import AdainResBlk1d, AdaLayerNorm, ChannelNorm
from voicelab.backends.kokoro.config import KokoroDims


class ConvNormBlock(nn.Module):
    """Conv1d -> channel LayerNorm -> LeakyReLU(0.2): [B, C, T] -> [B, C, T]."""

    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, kernel, padding=(kernel - 1) // 2)
        self.norm = ChannelNorm(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(self.norm(self.conv(x)), 0.2)


class TextEncoder(nn.Module):
    """tokens [B, T] -> phoneme features [B, 512, T] for the decoder."""

    def __init__(self, dims: KokoroDims) -> None:
        super().__init__()
        self.embedding = nn.Embedding(dims.n_token, dims.hidden)
        self.cnn = nn.ModuleList(ConvNormBlock(dims.hidden, dims.text_kernel) for _ in range(dims.n_layer))
        self.lstm = nn.LSTM(dims.hidden, dims.hidden // 2, batch_first=True, bidirectional=True)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens).transpose(1, 2)
        for block in self.cnn:
            x = block(x)
        x, _ = self.lstm(x.transpose(1, 2))
        return x.transpose(1, 2)


class DurationEncoder(nn.Module):
    """BiLSTMs interleaved with styled LayerNorms: bert features [B, T, 512], s [B, 128] -> [B, T, 640]."""

    def __init__(self, dims: KokoroDims) -> None:
        super().__init__()
        width = dims.hidden + dims.style
        self.lstms = nn.ModuleList(
            nn.LSTM(width, dims.hidden // 2, batch_first=True, bidirectional=True) for _ in range(dims.n_layer)
        )
        self.norms = nn.ModuleList(AdaLayerNorm(dims.style, dims.hidden) for _ in range(dims.n_layer))

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        styled = s[:, None, :].expand(-1, x.shape[1], -1)
        x = torch.cat([x, styled], dim=2)
        for lstm, norm in zip(self.lstms, self.norms, strict=True):
            x, _ = lstm(x)
            x = torch.cat([norm(x, s), styled], dim=2)
        return x


class ProsodyPredictor(nn.Module):
    """Durations from the BERT features, then F0 and energy curves from the aligned features."""

    def __init__(self, dims: KokoroDims) -> None:
        super().__init__()
        h, st = dims.hidden, dims.style
        self.text_encoder = DurationEncoder(dims)
        self.lstm = nn.LSTM(h + st, h // 2, batch_first=True, bidirectional=True)
        self.duration_proj = nn.Linear(h, dims.max_dur)
        self.shared = nn.LSTM(h + st, h // 2, batch_first=True, bidirectional=True)
        self.F0 = nn.ModuleList(
            [AdainResBlk1d(h, h, st), AdainResBlk1d(h, h // 2, st, upsample=True), AdainResBlk1d(h // 2, h // 2, st)]
        )
        self.N = nn.ModuleList(
            [AdainResBlk1d(h, h, st), AdainResBlk1d(h, h // 2, st, upsample=True), AdainResBlk1d(h // 2, h // 2, st)]
        )
        self.F0_proj = nn.Conv1d(h // 2, 1, 1)
        self.N_proj = nn.Conv1d(h // 2, 1, 1)

    def durations(self, d: torch.Tensor, speed: float) -> torch.Tensor:
        """d [B, T, 640] -> frames per phoneme [B, T] (float, unrounded), faster with ``speed`` > 1."""
        x, _ = self.lstm(d)
        return torch.sigmoid(self.duration_proj(x)).sum(dim=-1) / speed

    def curves(self, aligned: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """aligned [B, 640, F], s [B, 128] -> F0 [B, 2F] (Hz) and energy [B, 2F]."""
        x, _ = self.shared(aligned.transpose(1, 2))
        f0 = n = x.transpose(1, 2)
        for f0_block, n_block in zip(self.F0, self.N, strict=True):
            f0 = f0_block(f0, s)
            n = n_block(n, s)
        return self.F0_proj(f0)[:, 0], self.N_proj(n)[:, 0]
