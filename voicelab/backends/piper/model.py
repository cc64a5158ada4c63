"""Piper's VITS generator in PyTorch, inference only, read top-down as the architecture.

phoneme ids [B, T] -> TextEncoder -> (hidden, prior mean m, prior log-std logs) [B, C, T]
                   -> StochasticDurationPredictor (reverse) -> integer frame counts per phoneme
                   -> expand m, logs to frames, sample z_p = m + eps * exp(logs) * noise_scale
                   -> ResidualCouplingBlock (reverse) -> z [B, C, T_frames]
                   -> Generator (HiFi-GAN) -> audio [B, 1, T_frames * hop]

The blocks live in duration.py, flow.py and decoder.py; weights.py fills them from a Piper .onnx.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from voicelab.backends.piper.decoder import Generator
from voicelab.backends.piper.duration import LayerNorm, StochasticDurationPredictor
from voicelab.backends.piper.flow import ResidualCouplingBlock
from voicelab.backends.piper.noise import Generators, RowControls, Scale, generators_for, per_row, row_noise


class StageGraphs(Protocol):
    """Replays of the two host-sync-free stages over bucketed shapes (``graphs.VitsGraphs`` wraps a model this way);
    each returns ``None`` where the stage runs eagerly."""

    def encode(
        self, ids: torch.Tensor, lengths: torch.Tensor, noise: torch.Tensor, length_scale: Sequence[float]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """``VitsModel.encode`` for ids [b, t]: durations [b, t], m_p and logs_p [b, C, t]."""
        ...

    def decode(self, z_p: torch.Tensor, frame_lengths: torch.Tensor) -> torch.Tensor | None:
        """``VitsModel.decode`` for z_p [b, C, T_y]: audio [b, 1, T_y * hop]."""
        ...


@dataclass(frozen=True)
class VitsDims:
    """Every size the generator needs; read from a voice's weights and graph (see weights.infer_dims)."""

    n_vocab: int
    hidden_channels: int  # text encoder width
    inter_channels: int  # latent z width
    filter_channels: int  # text encoder FFN width
    n_heads: int
    n_layers: int
    ffn_kernel_size: int
    window_size: int  # relative attention reaches this many positions each side
    dp_kernel_size: int
    dp_n_flows: int
    dp_num_bins: int
    dp_tail_bound: float
    flow_n_flows: int
    flow_kernel_size: int
    flow_dilation_rate: int
    flow_n_layers: int
    resblock: str  # "1" or "2"
    resblock_kernel_sizes: tuple[int, ...]
    resblock_dilation_sizes: tuple[tuple[int, ...], ...]
    upsample_rates: tuple[int, ...]
    upsample_initial_channel: int
    upsample_kernel_sizes: tuple[int, ...]
    n_speakers: int = 1
    gin_channels: int = 0

    @property
    def hop_length(self) -> int:
        return math.prod(self.upsample_rates)


class RelativeSelfAttention(nn.Module):
    """Multi-head self-attention with learned relative-position keys and values (window +-w, heads share)."""

    def __init__(self, channels: int, n_heads: int, window_size: int) -> None:
        super().__init__()
        self.n_heads, self.window = n_heads, window_size
        self.k_channels = channels // n_heads
        self.conv_q = nn.Conv1d(channels, channels, 1)
        self.conv_k = nn.Conv1d(channels, channels, 1)
        self.conv_v = nn.Conv1d(channels, channels, 1)
        self.conv_o = nn.Conv1d(channels, channels, 1)
        self.emb_rel_k = nn.Parameter(torch.zeros(1, 2 * window_size + 1, self.k_channels))
        self.emb_rel_v = nn.Parameter(torch.zeros(1, 2 * window_size + 1, self.k_channels))

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        """x [B, C, T], key_mask [B, 1, 1, T] (True = real position) or None -> [B, C, T]."""
        b, c, t = x.shape
        heads = (self.n_heads, self.k_channels, t)
        q, k, v = (conv(x).view(b, *heads).transpose(2, 3) for conv in (self.conv_q, self.conv_k, self.conv_v))
        q = q / math.sqrt(self.k_channels)
        scores = q @ k.transpose(-2, -1) + self._band_to_square(q @ self.emb_rel_k[0].T)
        if key_mask is not None:
            scores = scores.masked_fill(~key_mask, -1e4)
        p = F.softmax(scores, dim=-1)  # [B, h, T, T]
        out = p @ v + self._square_to_band(p) @ self.emb_rel_v[0]
        return self.conv_o(out.transpose(2, 3).reshape(b, c, t))

    def _band_to_square(self, band: torch.Tensor) -> torch.Tensor:
        """[..., T, 2w+1] (offset j-i+w) -> [..., T, T], zero outside the band, by the pad-and-skew trick."""
        t, w = band.shape[-2], self.window
        skewed = F.pad(band, (0, t)).flatten(-2)[..., : t * (t + 2 * w)]
        return skewed.unflatten(-1, (t, t + 2 * w))[..., w : w + t]

    def _square_to_band(self, square: torch.Tensor) -> torch.Tensor:
        """[..., T, T] -> [..., T, 2w+1]: each row's weights at offsets -w..w (zero past the ends)."""
        t, w = square.shape[-1], self.window
        flat = F.pad(F.pad(square, (w, w)).flatten(-2), (0, t))
        return flat.unflatten(-1, (t, t + 2 * w + 1))[..., : 2 * w + 1]


class FFN(nn.Module):
    """conv(k) -> ReLU -> conv(k), both on masked input with 'same' padding."""

    def __init__(self, channels: int, filter_channels: int, kernel_size: int) -> None:
        super().__init__()
        self.conv_1 = nn.Conv1d(channels, filter_channels, kernel_size, padding=kernel_size // 2)
        self.conv_2 = nn.Conv1d(filter_channels, channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv_1(x * mask))
        return self.conv_2(x * mask) * mask


class Encoder(nn.Module):
    """Post-norm transformer: x = LN(x + attn(x)); x = LN(x + ffn(x))."""

    def __init__(
        self, channels: int, filter_channels: int, n_heads: int, n_layers: int, kernel_size: int, window_size: int
    ) -> None:
        super().__init__()
        self.attn_layers = nn.ModuleList(RelativeSelfAttention(channels, n_heads, window_size) for _ in range(n_layers))
        self.norm_layers_1 = nn.ModuleList(LayerNorm(channels) for _ in range(n_layers))
        self.ffn_layers = nn.ModuleList(FFN(channels, filter_channels, kernel_size) for _ in range(n_layers))
        self.norm_layers_2 = nn.ModuleList(LayerNorm(channels) for _ in range(n_layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        key_mask = mask.bool().unsqueeze(2)  # [B, 1, 1, T]
        x = x * mask
        layers = zip(self.attn_layers, self.norm_layers_1, self.ffn_layers, self.norm_layers_2, strict=True)
        for attn, norm_1, ffn, norm_2 in layers:
            x = norm_1(x + attn(x, key_mask))
            x = norm_2(x + ffn(x, mask))
        return x * mask


class TextEncoder(nn.Module):
    """ids [B, T] -> hidden [B, H, T], prior mean and log-std [B, C, T]."""

    def __init__(
        self,
        n_vocab: int,
        out_channels: int,
        hidden_channels: int,
        filter_channels: int,
        n_heads: int,
        n_layers: int,
        kernel_size: int,
        window_size: int,
    ) -> None:
        super().__init__()
        self.out_channels = out_channels
        self.emb = nn.Embedding(n_vocab, hidden_channels)
        self.encoder = Encoder(hidden_channels, filter_channels, n_heads, n_layers, kernel_size, window_size)
        self.proj = nn.Conv1d(hidden_channels, out_channels * 2, 1)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.emb(ids).transpose(1, 2) * math.sqrt(self.emb.embedding_dim)
        x = self.encoder(x, mask)
        stats = self.proj(x) * mask
        return x, stats[:, : self.out_channels], stats[:, self.out_channels :]


class VitsModel(nn.Module):
    """Piper's VITS generator: phoneme ids -> waveform. Built from a VitsDims; children take plain ints."""

    def __init__(self, dims: VitsDims) -> None:
        super().__init__()
        self.dims = dims
        d = dims
        self.enc_p = TextEncoder(
            d.n_vocab,
            d.inter_channels,
            d.hidden_channels,
            d.filter_channels,
            d.n_heads,
            d.n_layers,
            d.ffn_kernel_size,
            d.window_size,
        )
        self.dp = StochasticDurationPredictor(
            d.hidden_channels, d.dp_kernel_size, d.dp_n_flows, d.dp_num_bins, d.dp_tail_bound, d.gin_channels
        )
        self.flow = ResidualCouplingBlock(
            d.inter_channels,
            d.hidden_channels,
            d.flow_kernel_size,
            d.flow_dilation_rate,
            d.flow_n_layers,
            d.flow_n_flows,
            d.gin_channels,
        )
        self.dec = Generator(
            d.inter_channels,
            d.resblock,
            d.resblock_kernel_sizes,
            d.resblock_dilation_sizes,
            d.upsample_rates,
            d.upsample_initial_channel,
            d.upsample_kernel_sizes,
            d.gin_channels,
        )
        self.emb_g = nn.Embedding(d.n_speakers, d.gin_channels) if d.n_speakers > 1 else None
        self.graphs: StageGraphs | None = None  # CUDA graphs of encode/decode over bucketed shapes (graphs.py)

    def forward(
        self,
        ids: torch.Tensor,
        lengths: torch.Tensor,
        noise_scale: Scale = 0.667,
        length_scale: Scale = 1.0,
        noise_w: Scale = 0.8,
        generator: Generators = None,
        sid: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """ids [B, T] long, lengths [B] -> audio [B, 1, S] float32 (zero past each length), audio_lengths [B].

        Each scale is one value or one per row; ``generator`` is one for all rows or one per row. Noise is drawn
        row by row at the row's own length, so a row's audio does not depend on what it is padded with: rows of
        different requests can share a batch and still say exactly what each says alone.
        """
        b = ids.shape[0]
        rows = RowControls(
            per_row(noise_scale, b), per_row(length_scale, b), per_row(noise_w, b), generators_for(generator, b)
        )
        with exact_float32(ids.device):
            return self._synthesize(ids, lengths, rows, sid)

    def _synthesize(
        self, ids: torch.Tensor, lengths: torch.Tensor, rows: RowControls, sid: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        b, t = ids.shape
        token_counts = [int(n) for n in lengths.tolist()]  # read before any kernel is queued: no wait
        mask = (torch.arange(t, device=ids.device) < lengths.unsqueeze(1)).unsqueeze(1).float()  # [B, 1, T]
        g = self._speaker(sid, b, ids.device)
        noise = row_noise(2, token_counts, t, rows.noise_w, rows.generators, mask)
        length_scale = rows.length_scale[0] if len(set(rows.length_scale)) == 1 else rows.length_scale
        graphed = self.graphs.encode(ids, lengths, noise, rows.length_scale) if self.graphs and g is None else None
        durations, m_p, logs_p = graphed or self.encode(ids, mask, noise, length_scale, g)
        index, covered, frame_lengths = _frames_to_phonemes(durations)
        frame_mask = (torch.arange(covered.shape[-1], device=ids.device) < frame_lengths.unsqueeze(1)).unsqueeze(1)
        frame_mask = frame_mask.float()  # [B, 1, T_y]

        m = _gather_frames(m_p, index) * covered
        logs = _gather_frames(logs_p, index) * covered
        frame_counts = [int(n) for n in frame_lengths.tolist()]
        eps = row_noise(m.shape[1], frame_counts, m.shape[-1], rows.noise_scale, rows.generators, m)
        z_p = m + eps * torch.exp(logs)

        dtype = self.dec.conv_pre.weight.dtype
        audio = self.graphs.decode(z_p.to(dtype), frame_lengths) if self.graphs and g is None else None
        if audio is None:
            ragged = min(frame_counts) < frame_mask.shape[-1]
            audio = self.decode(z_p.to(dtype), frame_mask.to(dtype), ragged, g.to(dtype) if g is not None else None)
        return audio, frame_lengths * self.dims.hop_length

    def encode(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        noise: torch.Tensor,
        length_scale: float | Sequence[float] | torch.Tensor,
        g: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Text encoder and duration predictor: ids [B, T], mask [B, 1, T], dp noise [B, 2, T] ->
        frames per phoneme [B, T], prior mean and log-std [B, C, T]. No host sync: a CUDA graph can hold it."""
        x, m_p, logs_p = self.enc_p(ids, mask)
        logw = self.dp(x, mask, noise, g)
        return scaled_durations((torch.exp(logw) * mask).squeeze(1), length_scale), m_p, logs_p

    def decode(
        self, z_p: torch.Tensor, z_mask: torch.Tensor, ragged: bool, g: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Flow (reverse) and HiFi-GAN: z_p [B, C, T_y] in the decoder's dtype, z_mask [B, 1, T_y] ->
        audio [B, 1, T_y * hop] float32. ``ragged``: rows end before T_y, so every layer masks. No host sync."""
        z = self.flow(z_p, z_mask, g)
        return self.dec(z * z_mask, z_mask if ragged else None, g).float()

    def _speaker(self, sid: torch.Tensor | None, batch: int, device: torch.device) -> torch.Tensor | None:
        """Speaker conditioning [B, gin, 1] for multi-speaker voices (speaker 0 when sid is None)."""
        if self.emb_g is None:
            return None
        if sid is None:
            sid = torch.zeros(batch, dtype=torch.long, device=device)
        return self.emb_g(sid).unsqueeze(-1)


@contextlib.contextmanager
def exact_float32(device: torch.device) -> Iterator[None]:
    """Keep cuDNN from running float32 convolutions as TF32 (its default) while the model runs.

    Durations are ceil()-ed, so TF32 rounding in the text encoder can add or drop a frame; float32
    parts stay float32 and match the CPU and onnxruntime. Half-precision parts are unaffected.
    """
    if device.type != "cuda":
        yield
        return
    previous = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = previous


def scaled_durations(
    w: torch.Tensor, length_scale: float | Sequence[float] | torch.Tensor, steps: int = 24
) -> torch.Tensor:
    """Frames per phoneme [B, T] from predicted durations ``w`` [B, T] (zero where padded).

    Piper takes ceil(w * length_scale); about half the tokens are blanks predicted under one frame, which round
    up to one frame at any scale, so "twice as slow" came out ~1.5x and "slowly" (1.33x) ~1.2x. Here the scale is
    searched per item (bisection) so the total stays length_scale times the unscaled total, each token still
    rounded up. At length_scale 1 this is exactly Piper's ceil(w). ``length_scale`` may give one value per row.
    """
    base = torch.ceil(w)
    if isinstance(length_scale, int | float) and length_scale == 1.0:
        return base
    scale: torch.Tensor | float
    if isinstance(length_scale, int | float):
        scale = float(length_scale)
    elif isinstance(length_scale, torch.Tensor):
        scale = length_scale.reshape(-1, 1)  # [B, 1] already on the device (a CUDA graph's input)
    else:
        scale = torch.tensor(list(length_scale), dtype=w.dtype, device=w.device).reshape(-1, 1)
    target = base.sum(-1, keepdim=True) * scale  # [B, 1]
    low = torch.zeros_like(target)
    # At this scale the unrounded total alone reaches the target, so it is a valid upper bound.
    high = scale * base.sum(-1, keepdim=True) / w.sum(-1, keepdim=True).clamp_min(1e-6) + 1e-6
    for _ in range(steps):
        middle = (low + high) / 2
        short = torch.ceil(w * middle).sum(-1, keepdim=True) < target
        low = torch.where(short, middle, low)
        high = torch.where(short, high, middle)
    scaled = torch.ceil(w * high)
    return torch.where(scale == 1.0, base, scaled) if isinstance(scale, torch.Tensor) else scaled


def _frames_to_phonemes(durations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Integer durations [B, T] -> phoneme index per frame [B, T_y], covered [B, 1, T_y], lengths [B].

    ``covered`` is 1 where a frame belongs to some phoneme; it differs from the length mask only when
    every duration rounds to zero (the length is then clamped to one silent frame).

    Equivalent to VITS's monotonic path matrix (frame f belongs to phoneme j when
    cum[j-1] <= f < cum[j]) but gathers instead of multiplying by a [T_y, T] one-hot matrix.
    """
    ends = torch.cumsum(durations, dim=-1)
    lengths = ends[:, -1].clamp_min(1).long()
    t_y = int(lengths.max())
    frames = torch.arange(t_y, device=durations.device, dtype=ends.dtype).expand(ends.shape[0], t_y)
    index = torch.searchsorted(ends, frames.contiguous(), right=True)
    covered = (index < ends.shape[-1]).unsqueeze(1).to(durations.dtype)
    return index.clamp_max(ends.shape[-1] - 1), covered, lengths


def _gather_frames(stats: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """stats [B, C, T] at per-frame phoneme indices [B, T_y] -> [B, C, T_y]."""
    return stats.gather(2, index.unsqueeze(1).expand(-1, stats.shape[1], -1))
