"""Kokoro-82M v1.0 in PyTorch: phoneme ids and one 256-d style vector (ref_s) to 24 kHz speech.

Reads top-down as the architecture: PL-BERT and the duration encoder predict how many frames each phoneme lasts
(styled by the prosody half of ref_s, ``ref_s[:, 128:]``); the aligned features give F0 and energy curves; the
text encoder's features, aligned the same way, go with the curves into the ISTFTNet decoder (styled by the timbre
half, ``ref_s[:, :128]``). One utterance per call (B = 1): the LSTMs carry no padding mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from voicelab.backends.kokoro.albert import PlBert
from voicelab.backends.kokoro.config import KokoroDims
from voicelab.backends.kokoro.decoder import Decoder
from voicelab.backends.kokoro.text import ProsodyPredictor, TextEncoder


@dataclass(frozen=True)
class KokoroOutput:
    """audio [N] float32 at 24 kHz; frames [T]: alignment frames (600 samples each) per token."""

    audio: torch.Tensor
    frames: torch.Tensor


@dataclass(frozen=True)
class Alignment:
    """What the decoder needs besides the timbre: durations fixed, so a style fit can differentiate the rest.

    frames [T] int; prosody_features [1, 640, F] (the duration encoder's output, aligned); asr [1, 512, F].
    """

    frames: torch.Tensor
    prosody_features: torch.Tensor
    asr: torch.Tensor


def alignment_matrix(frames: torch.Tensor) -> torch.Tensor:
    """frames [T] (>= 1 each) -> [T, sum(frames)] with a one where frame f belongs to token t."""
    ends = torch.cumsum(frames, dim=0)
    starts = ends - frames
    index = torch.arange(int(ends[-1]), device=frames.device)
    return ((index[None, :] >= starts[:, None]) & (index[None, :] < ends[:, None])).float()


class KokoroModel(nn.Module):
    """tokens [1, T] (with the 0 pad token at both ends), ref_s [1, 256], speed -> ``KokoroOutput``."""

    def __init__(self, dims: KokoroDims) -> None:
        super().__init__()
        self.dims = dims
        self.bert = PlBert(dims)
        self.bert_encoder = nn.Linear(dims.bert_hidden, dims.hidden)
        self.predictor = ProsodyPredictor(dims)
        self.text_encoder = TextEncoder(dims)
        self.decoder = Decoder(dims)

    def align(
        self, tokens: torch.Tensor, ref_s: torch.Tensor, speed: float = 1.0, frames: torch.Tensor | None = None
    ) -> Alignment:
        """Durations from the prosody half of ref_s (or ``frames`` [T] given), and the features both curve and
        decoder stages read."""
        prosody = ref_s[:, self.dims.style :]
        d = self.predictor.text_encoder(self.bert_encoder(self.bert(tokens)), prosody)
        if frames is None:
            frames = torch.round(self.predictor.durations(d, speed)[0]).clamp(min=1).long()
        matrix = alignment_matrix(frames).to(d.dtype)
        asr = self.text_encoder(tokens) @ matrix
        return Alignment(frames=frames, prosody_features=d.transpose(1, 2) @ matrix, asr=asr)

    def render(
        self,
        alignment: Alignment,
        ref_s: torch.Tensor,
        noise: torch.Generator | None = None,
        f0_scale: float = 1.0,
    ) -> torch.Tensor:
        """The waveform [N] for fixed durations: differentiable in ref_s (both halves). ``f0_scale`` multiplies
        the predicted F0 curve before the decoder reads it (a fitted voice's pitch held to its prompt's)."""
        f0, energy = self.predictor.curves(alignment.prosody_features, ref_s[:, self.dims.style :])
        if f0_scale != 1.0:
            f0 = f0 * f0_scale
        return self.decoder(alignment.asr, f0, energy, ref_s[:, : self.dims.style], noise)[0]

    def forward(
        self,
        tokens: torch.Tensor,
        ref_s: torch.Tensor,
        speed: float = 1.0,
        noise: torch.Generator | None = None,
        f0_scale: float = 1.0,
    ) -> KokoroOutput:
        alignment = self.align(tokens, ref_s, speed)
        return KokoroOutput(audio=self.render(alignment, ref_s, noise, f0_scale), frames=alignment.frames)
