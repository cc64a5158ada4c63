"""The voice transform with pitch moved by TD-PSOLA on the device, the rest as ``voice.spectral`` does it.

The phase vocoder of ``spectral`` stretches every bin and reads the result back faster or slower; on the built-in
voice that keeps its weak fundamental and smears the pulses (the judges hear it as a duller voice than WORLD's).
Here the pitch moves in the time domain instead: the waveform is cut into two-period grains around marks one pitch
period apart (marks from the YIN track's integrated phase; snapping them to waveform peaks scored worse), and the
grains are laid down again at the new period, shortened to it when raising, the windows' sum evened out; unvoiced
stretches are copied at their own spacing. The pulses themselves are kept, so the formants stay where they were,
and the envelope step of ``spectral`` (the original envelope warped by the formant factor replaces each frame's
own), the equaliser and the whisper apply afterwards unchanged.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from voicelab.voice import spectral

UNVOICED_HZ = 100.0  # the spacing of grains where nothing is voiced (copied in place: no pitch to move)


def per_sample(track: torch.Tensor, hop: int, n: int) -> torch.Tensor:
    """A frame track (T,) with frames centred every ``hop`` samples, linearly interpolated to ``n`` samples."""
    position = torch.arange(n, device=track.device, dtype=torch.float32) / hop
    first = position.floor().long().clamp(max=track.shape[0] - 1)
    second = (first + 1).clamp(max=track.shape[0] - 1)
    frac = position - first
    return track[first] * (1.0 - frac) + track[second] * frac


def pitch_marks(f0: torch.Tensor, sr: int) -> torch.Tensor:
    """Sample positions (M,) one period apart: where the integrated phase of ``f0`` (n,) passes a whole cycle."""
    cycles = torch.cumsum(f0 / sr, 0).floor()
    return torch.cat([cycles.new_zeros(1, dtype=torch.long), torch.nonzero(cycles[1:] > cycles[:-1]).squeeze(-1) + 1])


def psola_row(x: torch.Tensor, f0: torch.Tensor, ratio: torch.Tensor, hop: int, sr: int) -> torch.Tensor:
    """One utterance (n,) with its pitch moved by ``ratio`` (T,) where ``f0`` (T,) is voiced; same length."""
    n = x.shape[0]
    voiced_frames = f0 > 0
    source_hz = per_sample(torch.where(voiced_frames, f0, torch.full_like(f0, UNVOICED_HZ)), hop, n)
    moved = per_sample(torch.where(voiced_frames, ratio, torch.ones_like(ratio)), hop, n)
    analysis = pitch_marks(source_hz, sr)
    synthesis = pitch_marks(source_hz * moved, sr)
    right = torch.searchsorted(analysis, synthesis).clamp(1, analysis.shape[0] - 1)
    left = right - 1
    nearest = torch.where(synthesis - analysis[left] <= analysis[right] - synthesis, left, right)
    if analysis.shape[0] == 1:
        nearest = torch.zeros_like(synthesis)
    source = analysis[nearest]
    period = torch.minimum(sr / source_hz[source], sr / (source_hz * moved)[synthesis]).round().clamp_min(2.0)
    reach = int(period.max())
    offsets = torch.arange(-reach, reach + 1, device=x.device)
    inside = offsets.abs().unsqueeze(0) < period.unsqueeze(-1)
    window = torch.where(inside, 0.5 + 0.5 * torch.cos(math.pi * offsets / period.unsqueeze(-1)), 0.0)
    read = source.unsqueeze(-1) + offsets
    grains = torch.where((read >= 0) & (read < n), x[read.clamp(0, n - 1)], 0.0) * window
    write = (synthesis.unsqueeze(-1) + offsets + reach).reshape(-1)
    out = x.new_zeros(n + 2 * reach + 1).index_add_(0, write, grains.reshape(-1))
    cover = x.new_zeros(n + 2 * reach + 1).index_add_(0, write, window.reshape(-1))
    smooth = max(3, int(0.01 * sr) | 1)  # the windows' sum, evened over 10 ms: a gain, not a waveform
    cover = F.avg_pool1d(cover.view(1, 1, -1), smooth, 1, smooth // 2, count_include_pad=False).view(-1)
    return (out / cover.clamp_min(0.25))[reach : reach + n]


def render(x: torch.Tensor, a: spectral.Analysis, c: spectral.Controls, seed: int = 0) -> torch.Tensor:
    """``spectral.render`` with the pitch of moved rows set by PSOLA instead of the phase vocoder (B, N)."""
    return spectral.render(a, c, seed, mover=functools.partial(_moved, x))


def _moved(x: torch.Tensor, a: spectral.Analysis, c: spectral.Controls, env: torch.Tensor) -> torch.Tensor:
    """Each row's pitch moved by PSOLA (B, T, K), then its envelope replaced by ``env`` as in ``spectral``."""
    grid, t = a.grid, a.spec.shape[1]
    ratio = spectral.pitch_ratio(a.f0, c)
    rows = []
    for row, length in enumerate(a.lengths.tolist()):
        y = psola_row(x[row, : int(length)], a.f0[row], ratio[row], grid.hop, a.sample_rate)
        rows.append(F.pad(y, (0, x.shape[-1] - int(length))))
    return spectral.envelope_replaced(torch.stack(rows), a, ratio, env)[:, :t]
