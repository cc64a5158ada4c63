"""A differentiable path to the project's GE2E embedding, for fitting a style vector by gradient descent.

Follows ``voice.encoder.SpeakerEncoder.embed`` (16 kHz, volume to -30 dBFS, 40-band power mel, partials of 160
frames, the mean of their unit embeddings), with two changes that keep gradients: the 24 kHz waveform is
resampled by a fixed polyphase filter (up 2, down 3, as scipy's ``resample_poly``) and long silences are not
cut (Kokoro's output has none worth cutting).
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.signal import firwin
from torch.nn import functional as F

from voicelab.voice.encoder import HOP, NORM_TARGET_DBFS, SpeakerEncoder, partial_slices

UP, DOWN = 2, 3  # 24 kHz -> 16 kHz


def resample_filter(device: torch.device) -> torch.Tensor:
    """scipy.signal.resample_poly's default low-pass for up=2, down=3, as a conv1d kernel [1, 1, taps]."""
    taps = firwin(2 * 10 * max(UP, DOWN) + 1, 1.0 / max(UP, DOWN), window=("kaiser", 5.0)) * UP
    return torch.tensor(np.asarray(taps[::-1], dtype=np.float32), device=device)[None, None]


def to_16k(wav24k: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """[N] at 24 kHz -> [2N/3] at 16 kHz, differentiably."""
    stuffed = torch.zeros(wav24k.shape[0] * UP, device=wav24k.device, dtype=wav24k.dtype)
    stuffed = stuffed.index_put((torch.arange(0, stuffed.shape[0], UP, device=wav24k.device),), wav24k)
    filtered = F.conv1d(stuffed[None, None], kernel, padding=kernel.shape[-1] // 2)[0, 0]
    return filtered[::DOWN]


def ge2e_embedding(encoder: SpeakerEncoder, wav16k: torch.Tensor) -> torch.Tensor:
    """Unit 256-d GE2E embedding of a 16 kHz waveform tensor, with gradients to it."""
    rms = torch.sqrt(wav16k.pow(2).mean() + 1e-10)
    wav = wav16k * (10 ** (NORM_TARGET_DBFS / 20) / rms)
    slices = partial_slices(len(wav))
    wav = F.pad(wav, (0, max(0, slices[-1].stop * HOP - len(wav))))
    mel = encoder.mel(wav)
    embedded = encoder.model(torch.stack([mel[s] for s in slices]))
    mean = embedded.mean(dim=0)
    return mean / torch.linalg.vector_norm(mean).clamp_min(1e-12)
