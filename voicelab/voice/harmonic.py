"""The voice transform re-excited at the new pitch on the device: a source-filter renderer in the STFT domain.

WORLD wins on quality because it makes every harmonic anew at the new pitch from the voice's envelope; the phase
vocoder of ``spectral`` and the grains of ``psola`` can only move the built-in voice's own, weak-fundamented pulses.
This renderer does what WORLD does, coarsely and in batched PyTorch: where the YIN track is voiced it synthesises an
excitation at the new F0 (a band-limited pulse train, every harmonic up to ``HARMONIC_HZ`` at equal strength, the
closed form of a sum of cosines, plus a little noise for breath), lets ``spectral.envelope_replaced`` whiten it and
impose the original envelope warped by the formant factor, and keeps the original frames, their formants warped,
where nothing is voiced (consonants keep their own bursts); a soft voicing mask over five frames joins the two. EQ
and whisper act as in ``spectral``.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from voicelab.voice import spectral
from voicelab.voice.psola import per_sample

HARMONIC_HZ = 4000.0  # harmonics above this are left to the noise (a probe of six transforms: 4-5 kHz best)
BREATH = 0.15  # noise beside the harmonics where voiced, relative to their RMS (0.05-0.25 probed; 0.15 best)
UNVOICED_HZ = 100.0  # the pulse train's rate where nothing is voiced (masked out there: it only keeps phase smooth)
MASK_FRAMES = 5


def pulse_train(phase: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """sum of cos(j * phase) for j = 1..count, per sample (the Dirichlet kernel's closed form), scaled to unit RMS."""
    half = torch.sin(phase / 2.0)
    safe = half.abs() > 1e-4
    value = torch.sin((count + 0.5) * phase) / (2.0 * torch.where(safe, half, torch.ones_like(half))) - 0.5
    return torch.where(safe, value, count) / torch.sqrt(count / 2.0)


def excitation(f0: torch.Tensor, ratio: torch.Tensor, hop: int, sr: int, n: int, noise: torch.Tensor) -> torch.Tensor:
    """The source at the new pitch (n,): pulses plus breath where ``f0`` (T,) is voiced, ``noise`` (n,) elsewhere."""
    voiced = per_sample((f0 > 0).float(), hop, n)
    hz = per_sample(torch.where(f0 > 0, f0 * ratio, torch.full_like(f0, UNVOICED_HZ)), hop, n)
    phase = torch.remainder(2.0 * math.pi * torch.cumsum(hz / sr, 0), 2.0 * math.pi)
    count = torch.clamp(torch.floor(HARMONIC_HZ / hz), min=1.0)
    return voiced * (pulse_train(phase, count) + BREATH * noise) + (1.0 - voiced) * noise


def render(x: torch.Tensor, a: spectral.Analysis, c: spectral.Controls, seed: int = 0) -> torch.Tensor:
    """``spectral.render`` with the voiced frames of moved rows re-excited at their new pitch (B, N)."""
    return spectral.render(a, c, seed, mover=functools.partial(_moved, x, seed=seed))


def _moved(x: torch.Tensor, a: spectral.Analysis, c: spectral.Controls, env: torch.Tensor, seed: int) -> torch.Tensor:
    """Voiced frames re-excited under ``env``, unvoiced ones the original with ``env`` in place of its own (B, T, K)."""
    ratio = spectral.pitch_ratio(a.f0, c)
    sources = []
    for row, length in enumerate(a.lengths.tolist()):  # each row its own draw: a batch equals each row alone
        generator = torch.Generator(device="cpu").manual_seed(seed + 11)
        noise = torch.zeros(x.shape[-1])
        noise[: int(length)] = torch.randn(int(length), generator=generator)
        sources.append(excitation(a.f0[row], ratio[row], a.grid.hop, a.sample_rate, x.shape[-1], noise.to(x.device)))
    voiced = spectral.envelope_replaced(torch.stack(sources), a, ratio, env)[:, : a.spec.shape[1]]
    kept = a.spec * torch.exp((env - a.log_env).clamp(-6.0, 6.0))
    mask = F.avg_pool1d((a.f0 > 0).float().unsqueeze(1), MASK_FRAMES, 1, MASK_FRAMES // 2, count_include_pad=False)
    mask = mask.squeeze(1).unsqueeze(-1)
    return mask * voiced + (1.0 - mask) * kept
