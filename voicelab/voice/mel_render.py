"""The ``mel`` renderer: the voice moved on the vocoder's own spectrogram, then re-voiced by HiFi-GAN on the device.

Each STFT frame's log magnitude (the HiFi-GAN training framing, ``voice.mel``) splits into a smooth envelope
(cepstral smoothing, F0-adaptive lifter, as in ``voice.spectral``) and the fine structure (the harmonic comb).
Pitch: the fine structure is scaled along frequency by each frame's ratio ``F0_new / F0``, so every harmonic
moves, the fundamental included. Formants: the envelope is read at ``f / factor``. EQ and tilt add in the log
domain. The result is projected onto the 80 mel bins and vocoded: the vocoder makes phases and excitation anew,
so nothing of the old fundamental's weakness or of a phase vocoder's smearing survives. Input at any rate is
resampled to 22.05 kHz and back (the match search renders at 16 kHz).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from voicelab.voice import spectral
from voicelab.voice.hifigan import HifiganGenerator, load_generator
from voicelab.voice.mel import MEL_RATE, MelFrontEnd, resample_rows
from voicelab.voice.pitch import voiced_median, yin_f0

_EPS = 1e-7


@dataclass(frozen=True)
class MelVocoder:
    """The front end and the generator on one device."""

    front: MelFrontEnd
    generator: HifiganGenerator


@functools.lru_cache(maxsize=4)
def vocoder_on(device: str) -> MelVocoder:
    """The vocoder for ``device``, loaded on first use and kept for the process (a worker has one device; a Soft
    restart replaces the process and with it this cache)."""
    return MelVocoder(MelFrontEnd(device), load_generator(device))


def moved_log_magnitude(log_mag: torch.Tensor, f0: torch.Tensor, c: spectral.Controls, n_fft: int) -> torch.Tensor:
    """(B, T, K) log magnitudes with pitch, formants and EQ moved; ``f0`` (B, T) in Hz, 0 unvoiced.

    ``c.eq_db`` must be on this grid's bins (``dsp.controls_for`` at the vocoder's rate).
    """
    b, t, k = log_mag.shape
    median = voiced_median(f0)
    period = torch.where(median > 0, MEL_RATE / median.clamp_min(1.0), torch.full_like(median, MEL_RATE / 200.0))
    envelope = spectral.cepstral_envelope(log_mag, spectral.LIFTER_PERIODS * period, n_fft)
    fine = log_mag - envelope
    bins = torch.arange(k, device=log_mag.device, dtype=log_mag.dtype)
    ratio = spectral.pitch_ratio(f0, c)
    moved_fine = spectral.lerp_bins(fine, (bins / ratio.unsqueeze(-1)).expand(b, t, k))
    warped = spectral.formant_warped(envelope, c.formant)
    eq = c.eq_db.unsqueeze(1) * (math.log(10.0) / 20.0)
    return warped + moved_fine + eq


def render(x: torch.Tensor, sr: int, c: spectral.Controls, vocoder: MelVocoder) -> torch.Tensor:
    """The batch (B, N) at ``sr`` re-voiced with its controls (B rows), before loudness, same shape."""
    n = x.shape[-1]
    front = vocoder.front
    hop = front.grid.hop
    x22 = resample_rows(x, sr, MEL_RATE)
    frames = max(2, math.ceil(x22.shape[-1] / hop))
    x22 = torch.nn.functional.pad(x22, (0, frames * hop - x22.shape[-1]))
    spec = front.stft(x22)
    log_mag = 0.5 * torch.log(spec.real.square() + spec.imag.square() + 1e-9)
    f0 = yin_f0(x22, MEL_RATE, hop)[:, :frames]
    f0 = torch.nn.functional.pad(f0, (0, frames - f0.shape[1]))
    mel = front.log_mel(torch.exp(moved_log_magnitude(log_mag, f0, c, front.grid.n_fft)))
    y = resample_rows(vocoder.generator(mel), MEL_RATE, sr)
    return torch.nn.functional.pad(y, (0, max(0, n - y.shape[-1])))[:, :n]
