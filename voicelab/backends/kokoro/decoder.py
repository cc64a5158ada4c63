"""The decoder: aligned phoneme features, F0 and energy, styled by the timbre half of ref_s, to a waveform."""

from __future__ import annotations

import torch
from torch import nn

from voicelab.backends.kokoro.blocks import AdainResBlk1d
from voicelab.backends.kokoro.config import KokoroDims
from voicelab.backends.kokoro.generator import Generator


class Decoder(nn.Module):
    """asr [B, 512, F], F0 and energy [B, 2F], s [B, 128] -> waveform [B, 600 F]."""

    def __init__(self, dims: KokoroDims) -> None:
        super().__init__()
        h, st = dims.hidden, dims.style
        wide = 1024 + 2 + 64
        self.encode = AdainResBlk1d(h + 2, 1024, st)
        self.decode = nn.ModuleList(
            [*(AdainResBlk1d(wide, 1024, st) for _ in range(3)), AdainResBlk1d(wide, h, st, upsample=True)]
        )
        self.F0_conv = nn.Conv1d(1, 1, 3, stride=2, padding=1)
        self.N_conv = nn.Conv1d(1, 1, 3, stride=2, padding=1)
        self.asr_res = nn.Conv1d(h, 64, 1)
        self.generator = Generator(dims)

    def forward(
        self,
        asr: torch.Tensor,
        f0: torch.Tensor,
        energy: torch.Tensor,
        s: torch.Tensor,
        noise: torch.Generator | None = None,
    ) -> torch.Tensor:
        f0_down = self.F0_conv(f0[:, None])
        n_down = self.N_conv(energy[:, None])
        x = self.encode(torch.cat([asr, f0_down, n_down], dim=1), s)
        residual = self.asr_res(asr)
        for block in self.decode:  # every block sees the features again (the last one doubles time)
            x = block(torch.cat([x, residual, f0_down, n_down], dim=1), s)
        return self.generator(x, s, f0, noise)
