"""FastSpeech2 (TensorFlowTTS's Baker voice) in PyTorch, inference only, read top-down as the architecture.

phoneme ids [B, T] -> Embedding + sinusoidal positions -> Encoder (post-norm FFT blocks) [B, T, C]
                   -> VarianceAdaptor: duration / F0 / energy predictors, each scaled by its per-utterance
                      ratio; F0 and energy embedded by a conv and added; LengthRegulator repeats each
                      phoneme by its integer frame count -> [B, F, C], frame mask [B, F]
                   -> Decoder (positions again + FFT blocks) -> Linear to mels -> + Postnet residual
                   -> mel [B, F, n_mels] (normalised log-mel, the vocoder's input)

Layout is [batch, time, channels] as in the original; convs transpose internally. Padded positions are
masked after every layer, and between the two convs of a block, so a padded batch gives each item
exactly what it gives alone (the original runs one utterance at a time with 'same' zero padding).
weights.py fills the model from the shipped .tflite. The Baker data is licensed for non-commercial use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class FastSpeech2Dims:
    """Every size the model needs; read from the weights' shapes (see weights.infer_fastspeech2_dims)."""

    n_vocab: int
    hidden: int
    n_heads: int
    head_dim: int
    encoder_layers: int
    decoder_layers: int
    ffn_channels: int
    ffn_kernel: int
    predictor_channels: int
    predictor_kernel: int
    predictor_layers: int
    variance_embedding_kernel: int
    n_mels: int
    postnet_channels: int
    postnet_kernel: int
    postnet_layers: int
    max_positions: int
    layer_norm_eps: float = 1e-5


@dataclass(frozen=True)
class FastSpeech2Output:
    """mel [B, F, n_mels] (zero past frame_lengths), frame_lengths [B], durations [B, T] (frames per id)."""

    mel: torch.Tensor
    frame_lengths: torch.Tensor
    durations: torch.Tensor


def mish(x: torch.Tensor) -> torch.Tensor:
    return x * torch.tanh(F.softplus(x))


class Conv1d(nn.Conv1d):
    """'same'-padded conv over [B, T, C] (time-major, as the original's Keras Conv1D)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int) -> None:
        super().__init__(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


class Positions(nn.Module):
    """Sinusoidal position table [max_positions + 1, C]; row 0 (padding) is zero. Loaded from the file."""

    def __init__(self, max_positions: int, channels: int) -> None:
        super().__init__()
        self.table: torch.Tensor
        self.register_buffer("table", torch.zeros(max_positions + 1, channels))

    def forward(self, mask: torch.Tensor) -> torch.Tensor:
        """mask [B, T] (True = real) -> [B, T, C]: position t+1 at real positions, row 0 at padding.

        Positions past the table (very slow speech) continue the same sinusoids, computed here."""
        positions = torch.arange(1, mask.shape[1] + 1, device=mask.device) * mask
        table = self.table
        if mask.shape[1] >= table.shape[0]:
            extra = sinusoids(torch.arange(table.shape[0], mask.shape[1] + 1, device=mask.device), table.shape[1])
            table = torch.cat([table, extra.to(table.dtype)])
        return F.embedding(positions, table)


def sinusoids(positions: torch.Tensor, channels: int) -> torch.Tensor:
    """[N] -> [N, C]: sin at even channels, cos at odd, angle pos / 10000^(2 floor(i/2) / C) (FastSpeech's table)."""
    i = torch.arange(channels, device=positions.device)
    angles = positions.double()[:, None] / torch.pow(10000.0, 2.0 * (i // 2).double() / channels)
    return torch.where(i % 2 == 0, torch.sin(angles), torch.cos(angles)).float()


class SelfAttention(nn.Module):
    """Multi-head self-attention with its output projection and post-norm residual: LN(x + out(attn(x)))."""

    def __init__(self, hidden: int, n_heads: int, head_dim: int, eps: float) -> None:
        super().__init__()
        self.n_heads, self.head_dim = n_heads, head_dim
        self.query = nn.Linear(hidden, n_heads * head_dim)
        self.key = nn.Linear(hidden, n_heads * head_dim)
        self.value = nn.Linear(hidden, n_heads * head_dim)
        self.out = nn.Linear(n_heads * head_dim, hidden)
        self.norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x [B, T, C], mask [B, T] bool -> [B, T, C] (zero at padding)."""
        b, t, _ = x.shape
        q, k, v = (proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2) for proj in self._qkv())
        keys = mask[:, None, None, :]  # [B, 1, 1, T]
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=keys)  # [B, h, T, d]
        context = context.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim)
        return self.norm(self.out(context) + x) * mask.unsqueeze(-1).to(x.dtype)

    def _qkv(self) -> tuple[nn.Linear, nn.Linear, nn.Linear]:
        return self.query, self.key, self.value


class FeedForward(nn.Module):
    """conv(k) -> mish -> conv(k) with a post-norm residual: LN(x + ffn(x))."""

    def __init__(self, hidden: int, channels: int, kernel_size: int, eps: float) -> None:
        super().__init__()
        self.conv1 = Conv1d(hidden, channels, kernel_size)
        self.conv2 = Conv1d(channels, hidden, kernel_size)
        self.norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x [B, T, C], mask [B, T] -> [B, T, C]."""
        m = mask.unsqueeze(-1).to(x.dtype)
        h = self.conv2(mish(self.conv1(x)) * m) * m
        return self.norm(h + x) * m


class FFTBlock(nn.Module):
    """One feed-forward transformer block: self-attention, then the conv feed-forward."""

    def __init__(self, hidden: int, n_heads: int, head_dim: int, ffn_channels: int, ffn_kernel: int, eps: float):
        super().__init__()
        self.attention = SelfAttention(hidden, n_heads, head_dim, eps)
        self.ffn = FeedForward(hidden, ffn_channels, ffn_kernel, eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.ffn(self.attention(x, mask), mask)


class FFTStack(nn.Module):
    """Positions added once, then n FFT blocks. The encoder over phonemes; the decoder over frames."""

    def __init__(
        self, n_layers: int, hidden: int, n_heads: int, head_dim: int, ffn_channels: int, ffn_kernel: int, eps: float
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            FFTBlock(hidden, n_heads, head_dim, ffn_channels, ffn_kernel, eps) for _ in range(n_layers)
        )

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x, positions [B, T, C], mask [B, T] -> [B, T, C]."""
        x = x + positions
        for layer in self.layers:
            x = layer(x, mask)
        return x


class VariancePredictor(nn.Module):
    """n x (conv -> ReLU -> LayerNorm), then Linear to one value per position: [B, T, C] -> [B, T]."""

    def __init__(self, hidden: int, channels: int, kernel_size: int, n_layers: int, eps: float) -> None:
        super().__init__()
        widths = [hidden] + [channels] * n_layers
        self.convs = nn.ModuleList(Conv1d(widths[i], channels, kernel_size) for i in range(n_layers))
        self.norms = nn.ModuleList(nn.LayerNorm(channels, eps=eps) for _ in range(n_layers))
        self.proj = nn.Linear(channels, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask.unsqueeze(-1).to(x.dtype)
        h = x * m
        for conv, norm in zip(self.convs, self.norms, strict=True):
            h = norm(torch.relu(conv(h))) * m
        return (self.proj(h) * m).squeeze(-1)


def regulate_length(x: torch.Tensor, durations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Repeat each position by its frame count: x [B, T, C], durations [B, T] int -> [B, F, C], mask [B, F]."""
    totals = durations.sum(dim=1)  # [B]
    n_frames = max(int(totals.max()), 1)
    ends = durations.cumsum(dim=1)  # [B, T], frame index where each phoneme stops
    frames = torch.arange(n_frames, device=x.device).expand(x.shape[0], n_frames).contiguous()
    index = torch.searchsorted(ends, frames, right=True).clamp(max=x.shape[1] - 1)  # [B, F]
    frame_mask = frames < totals.unsqueeze(1)
    expanded = torch.gather(x, 1, index.unsqueeze(-1).expand(-1, -1, x.shape[2]))
    return expanded * frame_mask.unsqueeze(-1).to(x.dtype), frame_mask


class VarianceAdaptor(nn.Module):
    """Predict durations, F0 and energy; add the embedded F0 and energy; expand phonemes to frames.

    Each utterance has its own ratios [B]: durations are round(relu(exp(log_d) - 1) * duration_ratio),
    F0 and energy (normalised) are multiplied by f0_ratio and energy_ratio, as in the original, and
    optionally shifted by an offset, before they are embedded.

    The shipped graph also applies dropout (p=0.5, kept values doubled) to both embeddings at
    inference: TensorFlowTTS calls those two Dropout layers with training=True, so every run of the
    original differs. Here the embeddings are used as they are (the dropout's expected value), which
    is deterministic. ``embedding_keep`` replays given keep-masks instead (the parity test uses it
    with the masks the reference run drew).
    """

    def __init__(
        self, hidden: int, channels: int, kernel_size: int, n_layers: int, embedding_kernel: int, eps: float
    ) -> None:
        super().__init__()
        self.duration_predictor = VariancePredictor(hidden, channels, kernel_size, n_layers, eps)
        self.f0_predictor = VariancePredictor(hidden, channels, kernel_size, n_layers, eps)
        self.energy_predictor = VariancePredictor(hidden, channels, kernel_size, n_layers, eps)
        self.f0_embedding = Conv1d(1, hidden, embedding_kernel)
        self.energy_embedding = Conv1d(1, hidden, embedding_kernel)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        ratios: torch.Tensor,
        offsets: torch.Tensor | None = None,
        embedding_keep: tuple[torch.Tensor, torch.Tensor] | None = None,
        durations: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, T, C], mask [B, T], ratios [B, 3] (duration, f0, energy) -> frames [B, F, C], mask, durations.

        ``offsets`` [B, 3] are added to the scaled normalised F0 and energy (column 0 is unused).
        ``durations`` [B, T] (frames per id), when given, replaces the predicted ones (and their ratio).
        """
        if durations is None:
            log_durations = self.duration_predictor(x, mask).float()
            scaled = torch.relu(torch.exp(log_durations) - 1.0) * ratios[:, :1].float()
            durations = torch.round(scaled).long() * mask
        f0 = self.f0_predictor(x, mask) * ratios[:, 1:2].to(x.dtype)
        energy = self.energy_predictor(x, mask) * ratios[:, 2:3].to(x.dtype)
        if offsets is not None:
            m = mask.to(x.dtype)
            f0, energy = f0 + offsets[:, 1:2].to(x.dtype) * m, energy + offsets[:, 2:3].to(x.dtype) * m
        f0_embedded = self.f0_embedding(f0.unsqueeze(-1))
        energy_embedded = self.energy_embedding(energy.unsqueeze(-1))
        if embedding_keep is not None:
            f0_embedded = f0_embedded * 2.0 * embedding_keep[0].to(x.dtype)
            energy_embedded = energy_embedded * 2.0 * embedding_keep[1].to(x.dtype)
        frames, frame_mask = regulate_length(x + f0_embedded + energy_embedded, durations)
        return frames, frame_mask, durations


class Postnet(nn.Module):
    """n x (conv -> batch norm (folded to scale and shift) -> tanh, none on the last): [B, F, M] -> [B, F, M]."""

    def __init__(self, n_mels: int, channels: int, kernel_size: int, n_layers: int) -> None:
        super().__init__()
        widths = [n_mels] + [channels] * (n_layers - 1) + [n_mels]
        self.convs = nn.ModuleList(Conv1d(widths[i], widths[i + 1], kernel_size) for i in range(n_layers))
        self.norms = nn.ModuleList(FrozenBatchNorm(widths[i + 1]) for i in range(n_layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask.unsqueeze(-1).to(x.dtype)
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms, strict=True)):
            x = norm(conv(x))
            x = (torch.tanh(x) if i < len(self.convs) - 1 else x) * m
        return x


class FrozenBatchNorm(nn.Module):
    """Inference batch norm as stored in the file: x * scale + shift (scale = gamma / sqrt(var + eps))."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(channels))
        self.shift = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.shift


class FastSpeech2(nn.Module):
    """Phoneme ids -> normalised log-mel frames. Built from FastSpeech2Dims; children take plain ints."""

    def __init__(self, dims: FastSpeech2Dims) -> None:
        super().__init__()
        self.dims = d = dims
        self.embedding = nn.Embedding(d.n_vocab, d.hidden)
        self.positions = Positions(d.max_positions, d.hidden)
        stack = (d.hidden, d.n_heads, d.head_dim, d.ffn_channels, d.ffn_kernel, d.layer_norm_eps)
        self.encoder = FFTStack(d.encoder_layers, *stack)
        self.variance = VarianceAdaptor(
            d.hidden,
            d.predictor_channels,
            d.predictor_kernel,
            d.predictor_layers,
            d.variance_embedding_kernel,
            d.layer_norm_eps,
        )
        self.decoder = FFTStack(d.decoder_layers, *stack)
        self.mel_linear = nn.Linear(d.hidden, d.n_mels)
        self.postnet = Postnet(d.n_mels, d.postnet_channels, d.postnet_kernel, d.postnet_layers)

    def forward(
        self,
        ids: torch.Tensor,
        ratios: torch.Tensor,
        offsets: torch.Tensor | None = None,
        embedding_keep: tuple[torch.Tensor, torch.Tensor] | None = None,
        durations: torch.Tensor | None = None,
    ) -> FastSpeech2Output:
        """ids [B, T] (0 = padding), ratios [B, 3] (duration, f0, energy) -> FastSpeech2Output.

        ``offsets`` shift the normalised F0 and energy; ``embedding_keep`` and ``durations`` replay a
        reference run (see VarianceAdaptor).
        """
        mask = ids != 0
        x = self.encoder(self.embedding(ids), self.positions(mask), mask)
        frames, frame_mask, durations = self.variance(x, mask, ratios, offsets, embedding_keep, durations)
        half = self.mel_linear.weight.dtype  # the decoder side may run in bfloat16 / float16
        h = self.decoder(frames.to(half), self.positions(frame_mask).to(half), frame_mask)
        mel = self.mel_linear(h) * frame_mask.unsqueeze(-1).to(h.dtype)
        mel = mel + self.postnet(mel, frame_mask)
        return FastSpeech2Output(mel=mel, frame_lengths=frame_mask.sum(dim=1), durations=durations)


def count_parameters(model: nn.Module) -> int:
    return sum(math.prod(p.shape) for p in model.parameters())
