"""ECAPA-TDNN (SpeechBrain's spkrec-ecapa-voxceleb) in our own PyTorch, inference only.

Front end, as that recipe's ``Fbank(n_mels=80)``: 16 kHz, a 400-sample periodic Hamming window (25 ms) every
160 samples (10 ms), frames centred with zero padding, the power spectrum, SpeechBrain's own mel triangles
(HTK mel centres, each triangle symmetric with its left band as half-width, peak 1), ``10 log10`` clamped at
1e-10, and everything below the utterance's peak minus 80 dB raised to it. Then the mean over each utterance's
frames is subtracted (``InputNormalization(norm_type="sentence", std_norm=False)``).

Module and tensor names mirror SpeechBrain's (``Conv`` and ``Norm`` hold ``nn.Conv1d``/``nn.BatchNorm1d`` as
``.conv``/``.norm``), so ``embedding_model.ckpt`` loads with ``strict=True``.

Lengths: past the front end every tensor is (batch, channels, frames), and ``Frames`` carries each row's valid
frame count. Convolutions pad each row by reflection about its own last valid frame and the squeeze-excitation
and pooling average over valid frames only, so a row of a padded batch computes what its clip computes alone.
SpeechBrain reflects at the batch's edge instead (a short row's last frames see its padding through the
convolutions); ``Frames(..., batch_edges=True)`` reproduces that, for the parity test against its batches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from voicelab.backends.strict_loading import load_state_strictly

SAMPLE_RATE = 16000
N_FFT = 400  # 25 ms window
HOP = 160  # 10 ms
AMIN = 1e-10  # power floor before the log
TOP_DB = 80.0  # dynamic range kept below each utterance's peak
STATS_EPS = 1e-12  # variance floor in the pooling


@dataclass(frozen=True)
class EcapaDims:
    """The checkpoint's shape, from hyperparams.yaml (``res2net_scale``, ``se_channels``: ECAPA_TDNN's defaults)."""

    n_mels: int = 80
    channels: tuple[int, ...] = (1024, 1024, 1024, 1024, 3072)
    kernels: tuple[int, ...] = (5, 3, 3, 3, 1)
    dilations: tuple[int, ...] = (1, 2, 3, 4, 1)
    attention: int = 128
    res2net_scale: int = 8
    se_channels: int = 128
    embedding: int = 192


def frame_counts(samples: torch.Tensor) -> torch.Tensor:
    """Frames of a centred STFT over ``samples`` samples: (batch,) -> (batch,) int64."""
    return 1 + samples.long() // HOP


def mel_filters(n_mels: int, sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT) -> torch.Tensor:
    """SpeechBrain's triangles from 0 Hz to Nyquist, (1 + n_fft // 2, n_mels), computed as it does (float32)."""
    to_mel = lambda hz: 2595.0 * math.log10(1.0 + hz / 700.0)  # noqa: E731
    mel = torch.linspace(to_mel(0.0), to_mel(sample_rate / 2), n_mels + 2)
    hz = 700.0 * (torch.pow(10.0, mel / 2595.0) - 1.0)
    centre, half_width = hz[1:-1], (hz[1:] - hz[:-1])[:-1]
    freqs = torch.linspace(0, sample_rate // 2, n_fft // 2 + 1)
    slope = (freqs[None, :] - centre[:, None]) / half_width[:, None]
    return torch.clamp(torch.minimum(slope + 1.0, 1.0 - slope), min=0.0).T.contiguous()


def valid_mask(counts: torch.Tensor, length: int) -> torch.Tensor:
    """(batch,) frame counts -> (batch, length) bool, True on each row's valid frames."""
    return torch.arange(length, device=counts.device)[None, :] < counts[:, None]


class Fbank(nn.Module):
    """(batch, samples) 16 kHz zero-padded -> (batch, frames, n_mels) log-mel energies in dB."""

    window: torch.Tensor
    filters: torch.Tensor

    def __init__(self, n_mels: int) -> None:
        super().__init__()
        self.register_buffer("window", torch.hamming_window(N_FFT), persistent=False)
        self.register_buffer("filters", mel_filters(n_mels), persistent=False)

    def forward(self, wavs: torch.Tensor, counts: torch.Tensor | None = None) -> torch.Tensor:
        """``counts``: each row's valid frames, so its 80 dB floor comes from its own frames (None: all frames)."""
        spec = torch.stft(wavs, N_FFT, HOP, N_FFT, self.window, center=True, pad_mode="constant", return_complex=True)
        power = torch.view_as_real(spec).pow(2).sum(-1).transpose(1, 2)  # (batch, frames, 1 + N_FFT // 2)
        db = 10.0 * torch.log10(torch.clamp(power @ self.filters, min=AMIN))
        peaks = db if counts is None else db.masked_fill(~valid_mask(counts, db.shape[1])[..., None], -math.inf)
        return torch.maximum(db, (peaks.amax(dim=(1, 2)) - TOP_DB)[:, None, None])


def sentence_mean_norm(feats: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """(batch, frames, n_mels) minus each row's mean over its first ``counts`` frames (padding shifted alike)."""
    valid = valid_mask(counts, feats.shape[1])[..., None].to(feats.dtype)
    mean = (feats * valid).sum(dim=1, keepdim=True) / counts[:, None, None].to(feats.dtype)
    return feats - mean


class Frames:
    """Each row's valid frames in a padded batch: the mask for averages, the reflection for convolutions."""

    def __init__(self, counts: torch.Tensor, length: int, batch_edges: bool = False, ragged: bool = False) -> None:
        """``ragged``: take every row as ending before the batch's edge without reading ``counts`` on the host
        (the gather reflects a full row as the plain pad does), so a CUDA graph can hold the call."""
        self.counts = counts
        self.length = length
        self.mask = valid_mask(counts, length)[:, None, :]  # (batch, 1, frames)
        self.uniform = batch_edges or (not ragged and bool((counts == length).all()))
        self._index: dict[int, torch.Tensor] = {}

    def pad(self, x: torch.Tensor, pad: int) -> torch.Tensor:
        """(batch, channels, frames) -> (batch, channels, frames + 2 pad), reflected about each row's edges."""
        if pad == 0:
            return x
        if self.uniform:
            return F.pad(x, (pad, pad), mode="reflect")
        if pad not in self._index:
            j = torch.arange(-pad, self.length + pad, device=x.device)[None, :]
            last = (self.counts - 1)[:, None]
            reflected = torch.where(j < 0, -j, torch.where(j > last, 2 * last - j, j))
            self._index[pad] = reflected.clamp(0, self.length - 1)[:, None, :]
        index = self._index[pad]
        return torch.gather(x, 2, index.expand(-1, x.shape[1], -1))

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, channels, frames) -> (batch, channels, 1): the average over valid frames."""
        mask = self.mask.to(x.dtype)
        return (x * mask).sum(dim=2, keepdim=True) / mask.sum(dim=2, keepdim=True)


class Conv(nn.Module):
    """``nn.Conv1d`` with 'same' reflect padding: (batch, c_in, frames) -> (batch, c_out, frames)."""

    def __init__(self, c_in: int, c_out: int, kernel: int, dilation: int = 1) -> None:
        super().__init__()
        self.pad = dilation * (kernel - 1) // 2
        self.conv = nn.Conv1d(c_in, c_out, kernel, dilation=dilation)

    def forward(self, x: torch.Tensor, frames: Frames | None = None) -> torch.Tensor:
        if self.pad:
            assert frames is not None, "a convolution wider than one frame needs the rows' frames"
            x = frames.pad(x, self.pad)
        out: torch.Tensor = self.conv(x)
        return out


class Norm(nn.Module):
    """``nn.BatchNorm1d`` (running statistics, eval only): (batch, channels, frames) -> the same."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.norm(x)
        return out


class TDNNBlock(nn.Module):
    """Conv -> ReLU -> BatchNorm (the norm after the activation, as trained): (batch, c_in, T) -> (batch, c_out, T)."""

    def __init__(self, c_in: int, c_out: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.conv = Conv(c_in, c_out, kernel, dilation)
        self.norm = Norm(c_out)

    def forward(self, x: torch.Tensor, frames: Frames | None = None) -> torch.Tensor:
        out: torch.Tensor = self.norm(torch.relu(self.conv(x, frames)))
        return out


class Res2NetBlock(nn.Module):
    """``scale`` channel groups; group i > 0 goes through a TDNN with group i-1's output added: (B, C, T) -> same."""

    def __init__(self, channels: int, scale: int, kernel: int, dilation: int) -> None:
        super().__init__()
        width = channels // scale
        self.scale = scale
        self.blocks = nn.ModuleList(TDNNBlock(width, width, kernel, dilation) for _ in range(scale - 1))

    def forward(self, x: torch.Tensor, frames: Frames) -> torch.Tensor:
        groups = torch.chunk(x, self.scale, dim=1)
        outs = [groups[0]]
        for group, block in zip(groups[1:], self.blocks, strict=True):
            outs.append(block(group if len(outs) == 1 else group + outs[-1], frames))
        return torch.cat(outs, dim=1)


class SEBlock(nn.Module):
    """Squeeze-excitation: channel gates from the mean over valid frames: (batch, C, T) -> (batch, C, T)."""

    def __init__(self, channels: int, se_channels: int) -> None:
        super().__init__()
        self.conv1 = Conv(channels, se_channels, 1)
        self.conv2 = Conv(se_channels, channels, 1)

    def forward(self, x: torch.Tensor, frames: Frames) -> torch.Tensor:
        gates = torch.sigmoid(self.conv2(torch.relu(self.conv1(frames.mean(x)))))  # (batch, C, 1)
        return gates * x


class SERes2NetBlock(nn.Module):
    """TDNN (1x1) -> Res2Net (dilated) -> TDNN (1x1) -> SE, plus the input: (batch, C, T) -> (batch, C, T)."""

    def __init__(self, channels: int, dims: EcapaDims, kernel: int, dilation: int) -> None:
        super().__init__()
        self.tdnn1 = TDNNBlock(channels, channels, 1, 1)
        self.res2net_block = Res2NetBlock(channels, dims.res2net_scale, kernel, dilation)
        self.tdnn2 = TDNNBlock(channels, channels, 1, 1)
        self.se_block = SEBlock(channels, dims.se_channels)

    def forward(self, x: torch.Tensor, frames: Frames) -> torch.Tensor:
        y = self.tdnn2(self.res2net_block(self.tdnn1(x), frames))
        out: torch.Tensor = self.se_block(y, frames) + x
        return out


def weighted_stats(x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(batch, C, T) values and weights summing to 1 over T -> weighted mean and std, each (batch, C)."""
    mean = (weights * x).sum(dim=2)
    var = (weights * (x - mean[:, :, None]).pow(2)).sum(dim=2)
    return mean, torch.sqrt(var.clamp(min=STATS_EPS))


class AttentiveStatisticsPooling(nn.Module):
    """Per-channel attention over valid frames (with the utterance's mean/std as context): (B, C, T) -> (B, 2C)."""

    def __init__(self, channels: int, attention: int) -> None:
        super().__init__()
        self.tdnn = TDNNBlock(channels * 3, attention, 1, 1)
        self.conv = Conv(attention, channels, 1)

    def forward(self, x: torch.Tensor, frames: Frames) -> torch.Tensor:
        mask = frames.mask.to(x.dtype)
        mean, std = weighted_stats(x, mask / mask.sum(dim=2, keepdim=True))
        length = x.shape[2]
        context = torch.cat([x, mean[:, :, None].expand(-1, -1, length), std[:, :, None].expand(-1, -1, length)], 1)
        logits = self.conv(torch.tanh(self.tdnn(context)))  # (batch, C, T)
        weights = torch.softmax(logits.masked_fill(~frames.mask, -math.inf), dim=2)
        return torch.cat(weighted_stats(x, weights), dim=1)


class EcapaTdnn(nn.Module):
    """(batch, frames, n_mels) normalised log-mels + their ``Frames`` -> (batch, embedding) raw speaker embeddings."""

    def __init__(self, dims: EcapaDims) -> None:
        super().__init__()
        c, k, d = dims.channels, dims.kernels, dims.dilations
        blocks: list[nn.Module] = [TDNNBlock(dims.n_mels, c[0], k[0], d[0])]
        for i in range(1, len(c) - 1):
            if c[i] != c[i - 1]:
                raise ValueError("this port has no shortcut convolution: SE-Res2Net blocks keep their width")
            blocks.append(SERes2NetBlock(c[i], dims, k[i], d[i]))
        self.blocks = nn.ModuleList(blocks)
        self.mfa = TDNNBlock(c[-2] * (len(c) - 2), c[-1], k[-1], d[-1])  # multi-layer feature aggregation
        self.asp = AttentiveStatisticsPooling(c[-1], dims.attention)
        self.asp_bn = Norm(c[-1] * 2)
        self.fc = Conv(c[-1] * 2, dims.embedding, 1)

    def forward(self, feats: torch.Tensor, frames: Frames) -> torch.Tensor:
        x = self.blocks[0](feats.transpose(1, 2), frames)  # (batch, C0, T)
        layers = []
        for block in self.blocks[1:]:
            x = block(x, frames)
            layers.append(x)
        x = self.mfa(torch.cat(layers, dim=1), frames)  # (batch, C_last, T)
        stats = self.asp_bn(self.asp(x, frames)[:, :, None])  # (batch, 2 C_last, 1)
        out: torch.Tensor = self.fc(stats)[:, :, 0]
        return out


class EcapaEncoder(nn.Module):
    """16 kHz waveforms -> raw ECAPA embeddings: Fbank -> sentence mean normalisation -> ECAPA-TDNN."""

    def __init__(self, dims: EcapaDims | None = None) -> None:
        super().__init__()
        dims = dims or EcapaDims()
        self.fbank = Fbank(dims.n_mels)
        self.embedding_model = EcapaTdnn(dims)

    def forward(self, wavs: torch.Tensor, samples: torch.Tensor, ragged: bool = False) -> torch.Tensor:
        """(batch, samples) zero-padded + (batch,) each row's length -> (batch, embedding), rows as if alone;
        ``ragged`` as ``Frames``'s (nothing read on the host: the call can be captured)."""
        counts = frame_counts(samples)
        feats = sentence_mean_norm(self.fbank(wavs, counts), counts)  # (batch, frames, n_mels)
        out: torch.Tensor = self.embedding_model(feats, Frames(counts, feats.shape[1], ragged=ragged))
        return out


def load_embedding_state(model: EcapaTdnn, state: dict[str, torch.Tensor]) -> int:
    """``embedding_model.ckpt``'s tensors into ``model`` (same names and shapes, or a BackendLoadError naming them).

    The checkpoint holds some 73,000 subnormal values (channels weight decay left for dead); they are set to zero,
    which moves no embedding by a float32 rounding but makes CPU inference about five times faster (subnormal
    arithmetic is slow on x86). Returns how many were zeroed.
    """
    load_state_strictly(model, state, "The ECAPA judge's weights do not fit its model")
    zeroed = 0
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.dtype == torch.float32:
                subnormal = _subnormal_float32(tensor)
                zeroed += int(subnormal.sum())
                tensor.masked_fill_(subnormal, 0.0)
    return zeroed


def _subnormal_float32(tensor: torch.Tensor) -> torch.Tensor:
    """Subnormal entries told by their bits (a zero exponent, a nonzero mantissa): a comparison would miss them in a
    process where ``torch.set_flush_denormal(True)`` is on (the Mandarin voice turns it on), as the CPU reads them
    as zero there."""
    bits = tensor.view(torch.int32)
    return ((bits & 0x7F800000) == 0) & ((bits & 0x007FFFFF) != 0)
