"""The voice transform in PyTorch, batched, on the worker's device: STFT, envelope, phase-vocoder pitch scaling.

Each frame's log spectrum splits into a smooth envelope (cepstral smoothing with an F0-adaptive lifter) and
the fine structure (harmonics). Pitch: each frame is time-stretched by its ratio ``r = F0_new / F0`` (a
phase vocoder integrated by one cumulative sum over frames, identity phase locking to spectral peaks, so a
time-varying ratio for pitch range costs nothing extra), then read back at the original rate through a
windowed sinc (low-passed where it reads faster), which moves pitch and formants by ``r``; each frame's
envelope is then replaced by the original one warped by the formant factor. Equaliser and tilt act on the
same frames; whispers replace the excitation by noise under a smoother envelope.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from voicelab.voice.pitch import voiced_median, yin_f0

LIFTER_PERIODS = 0.9  # the cepstral lifter ends at this fraction of the median pitch period
WHISPER_SMOOTH_HZ = 250.0  # the whisper envelope is smoothed over about this width
F0_LIMITS = (40.0, 1000.0)
_EPS = 1e-7


@dataclass(frozen=True)
class Grid:
    """STFT frame: ~46 ms (resolves a 60 Hz voice's harmonics), hop an eighth of it."""

    n_fft: int
    hop: int

    @classmethod
    def for_rate(cls, sr: int) -> Grid:
        n_fft = 1 << round(math.log2(0.046 * sr))
        return cls(n_fft, n_fft // 8)


@dataclass(frozen=True)
class Analysis:
    """One batch of utterances, analysed once and rendered any number of times (the matcher's search).

    spec: complex STFT (B, T, K). log_mag/log_env: natural-log magnitude and envelope (B, T, K).
    omega: instantaneous frequency, radians per hop (B, T, K). f0: Hz per frame, 0 unvoiced (B, T).
    lengths: samples per row (B,).
    """

    spec: torch.Tensor
    log_mag: torch.Tensor
    log_env: torch.Tensor
    omega: torch.Tensor
    f0: torch.Tensor
    lengths: torch.Tensor
    sample_rate: int
    grid: Grid


@dataclass(frozen=True)
class Controls:
    """Per-row transform settings as tensors (B,); ``target_hz`` is NaN where the median stays put.

    eq_db: gain per STFT bin (B, K), equaliser and tilt together.
    """

    semitones: torch.Tensor
    pitch_range: torch.Tensor
    target_hz: torch.Tensor
    formant: torch.Tensor
    eq_db: torch.Tensor
    whisper: torch.Tensor
    moves_pitch: torch.Tensor


def _window(grid: Grid, device: torch.device) -> torch.Tensor:
    return torch.hann_window(grid.n_fft, periodic=True, device=device)


def analyse(x: torch.Tensor, lengths: torch.Tensor, sr: int) -> Analysis:
    """STFT, F0, envelope and instantaneous frequency of a padded batch (B, N)."""
    grid = Grid.for_rate(sr)
    window = _window(grid, x.device)
    spec = torch.stft(x, grid.n_fft, grid.hop, window=window, center=True, pad_mode="constant", return_complex=True)
    spec = spec.transpose(1, 2)  # (B, T, K)
    log_mag = torch.log(spec.abs() + _EPS)
    f0 = yin_f0(x, sr, grid.hop)[:, : spec.shape[1]]
    f0 = F.pad(f0, (0, spec.shape[1] - f0.shape[1]))
    median = voiced_median(f0)
    period = torch.where(median > 0, sr / median.clamp_min(1.0), torch.full_like(median, sr / 200.0))
    log_env = cepstral_envelope(log_mag, LIFTER_PERIODS * period, grid.n_fft)
    return Analysis(spec, log_mag, log_env, _instantaneous(spec, grid), f0, lengths, sr, grid)


def cepstral_envelope(log_mag: torch.Tensor, cutoff: torch.Tensor, n_fft: int) -> torch.Tensor:
    """Smooth log envelope (B, T, K): the real cepstrum kept below ``cutoff`` samples per row (B,), tapered."""
    cep = torch.fft.irfft(log_mag, n_fft, dim=-1)
    q = torch.arange(n_fft, device=log_mag.device, dtype=log_mag.dtype)
    q = torch.minimum(q, n_fft - q)  # the cepstrum is even
    edge = cutoff.to(log_mag.dtype).view(-1, 1, 1)
    lifter = torch.clamp(2.0 - 2.0 * q / edge, 0.0, 1.0)  # 1 below half the cutoff, linear to 0 at the cutoff
    return torch.fft.rfft(cep * lifter, dim=-1).real


def _instantaneous(spec: torch.Tensor, grid: Grid) -> torch.Tensor:
    """Radians per hop of each bin: its nominal advance plus the wrapped deviation of the measured phase step."""
    k = torch.arange(spec.shape[-1], device=spec.device, dtype=torch.float32)
    nominal = 2.0 * math.pi * k * grid.hop / grid.n_fft
    phase = torch.angle(spec)
    step = torch.diff(phase, dim=1, prepend=phase[:, :1]) - nominal
    deviation = torch.remainder(step + math.pi, 2.0 * math.pi) - math.pi
    omega = nominal + deviation
    omega[:, 0] = nominal
    return omega


def pitch_ratio(f0: torch.Tensor, c: Controls) -> torch.Tensor:
    """F0_new / F0 per frame (B, T) of a track ``f0`` (B, T); unvoiced frames take the utterance's level ratio."""
    voiced = f0 > 0
    log_f0 = torch.log(f0.clamp_min(1.0))
    centre = torch.log(voiced_median(f0).clamp_min(1.0)).unsqueeze(-1)
    target = torch.log(torch.nan_to_num(c.target_hz, nan=1.0).clamp_min(1.0)).unsqueeze(-1)
    level = torch.where(torch.isnan(c.target_hz).unsqueeze(-1), centre, target)
    level = level + (c.semitones * math.log(2.0) / 12.0).unsqueeze(-1)
    new = level + c.pitch_range.unsqueeze(-1) * (log_f0 - centre)
    new = new.clamp(math.log(F0_LIMITS[0]), math.log(F0_LIMITS[1]))
    log_ratio = torch.where(voiced, new - log_f0, level - centre)
    has_voice = voiced.any(-1, keepdim=True)
    log_ratio = torch.where(has_voice, log_ratio, (c.semitones * math.log(2.0) / 12.0).unsqueeze(-1))
    smooth = F.avg_pool1d(log_ratio.unsqueeze(1), 3, 1, 1, count_include_pad=False).squeeze(1)
    return torch.exp(smooth)


def formant_warped(log_env: torch.Tensor, formant: torch.Tensor) -> torch.Tensor:
    """Each frame's log envelope (B, T, K) read at f / ``formant`` (B,): formants moved up by the factor."""
    b, t, k = log_env.shape
    bins = torch.arange(k, device=log_env.device, dtype=log_env.dtype)
    return lerp_bins(log_env, (bins / formant.view(-1, 1, 1)).expand(b, t, k))


def lerp_bins(values: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
    """``values`` (B, T, K) read at fractional bin positions (B, T, K), clamped to the last bin."""
    top = values.shape[-1] - 1
    pos = position.clamp(0.0, float(top))
    low = pos.floor().long().clamp(max=top - 1)
    frac = pos - low
    a, b = values.gather(-1, low), values.gather(-1, low + 1)
    return a + frac * (b - a)


def _peak_lock(log_mag: torch.Tensor, phase: torch.Tensor, source_phase: torch.Tensor) -> torch.Tensor:
    """Identity phase locking: each bin keeps its analysis phase offset from the nearest spectral peak."""
    k = log_mag.shape[-1]
    left = F.pad(log_mag[..., :-1], (1, 0), value=-1e9)
    right = F.pad(log_mag[..., 1:], (0, 1), value=-1e9)
    peak = (log_mag >= left) & (log_mag > right)
    index = torch.arange(k, device=log_mag.device).expand_as(log_mag)
    before = torch.where(peak, index, torch.full_like(index, -(10**6))).cummax(-1).values
    after = torch.where(peak, index, torch.full_like(index, 10**6)).flip(-1).cummin(-1).values.flip(-1)
    nearest = torch.where(index - before <= after - index, before, after).clamp(0, k - 1)
    anchor = phase.gather(-1, nearest) - source_phase.gather(-1, nearest)
    return source_phase + anchor


def stretch(a: Analysis, ratio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Phase-vocoder time stretch, frame t by ``ratio[:, t]``: the stretched batch and each frame's position.

    Synthesis hops are whole samples; each bin's phase advances by its instantaneous frequency times the hop
    actually used (one cumulative sum), then is locked to the nearest spectral peak.
    """
    grid, (b, t, _) = a.grid, a.spec.shape
    hops = torch.clamp(torch.round(grid.hop * ratio), min=1.0)
    hops[:, 0] = 0.0
    positions = hops.cumsum(1)  # centre of synthesis frame t
    advance = a.omega * (hops / grid.hop).unsqueeze(-1)
    phase = torch.angle(a.spec)
    locked = _peak_lock(a.log_mag, advance.cumsum(1) + phase[:, :1], phase)
    window = _window(grid, a.spec.device)
    frames = torch.fft.irfft(torch.polar(a.spec.abs(), locked), grid.n_fft, dim=-1)
    frames = frames * window  # frame t starts n_fft // 2 before its centre: buffer index = time + n_fft // 2
    size = int(positions.max()) + grid.n_fft + 1
    starts = positions.long()  # a frame's first sample sits n_fft // 2 before its centre (offset by the padding)
    index = (starts.unsqueeze(-1) + torch.arange(grid.n_fft, device=frames.device)).reshape(b, -1)
    out = torch.zeros(b, size, device=frames.device).scatter_add_(1, index, frames.reshape(b, -1))
    norm = torch.zeros(b, size, device=frames.device)
    norm.scatter_add_(1, index, window.square().expand(b, t, -1).reshape(b, -1))
    out = out / norm.clamp_min(1e-3 * float(window.square().sum()) / grid.hop)
    return out, positions


def resample_back(z: torch.Tensor, positions: torch.Tensor, grid: Grid, n: int) -> torch.Tensor:
    """Read the stretched signal back on the original time grid (B, n): windowed sinc, low-passed where faster."""
    taps = 16
    if positions.shape[1] < 2:  # one frame: nothing was stretched
        positions = torch.cat([positions, positions + grid.hop], dim=1)
    t_frames = positions.shape[1]
    time = torch.arange(n, device=z.device, dtype=torch.float32) / grid.hop
    frame = time.floor().long().clamp(max=t_frames - 2)
    frac = (time - frame).unsqueeze(0)
    start = positions.gather(1, frame.expand(z.shape[0], -1))
    step = positions.gather(1, (frame + 1).expand(z.shape[0], -1)) - start
    where = start + frac * step + grid.n_fft // 2  # in the stretched buffer
    cutoff = torch.clamp(grid.hop / step.clamp_min(1.0), max=1.0).unsqueeze(-1)
    base = where.floor()
    offsets = torch.arange(-taps + 1, taps + 1, device=z.device, dtype=torch.float32)
    distance = (where - base).unsqueeze(-1) - offsets
    kernel = cutoff * torch.special.sinc(cutoff * distance) * (0.5 + 0.5 * torch.cos(math.pi * distance / taps))
    index = (base.long().unsqueeze(-1) + offsets.long()).clamp(0, z.shape[1] - 1)
    samples = z.gather(1, index.reshape(z.shape[0], -1)).reshape(index.shape)
    return (samples * kernel).sum(-1)


# How a renderer moves pitch: (analysis, controls, the warped envelope) -> the moved rows' frames (B, T, K).
Mover = Callable[[Analysis, Controls, torch.Tensor], torch.Tensor]


def render(a: Analysis, c: Controls, seed: int = 0, mover: Mover | None = None) -> torch.Tensor:
    """The transformed batch (B, N), before loudness; rows that keep pitch and formants keep their phases.

    ``mover`` moves the pitch of the rows that move it (default: this module's phase vocoder; ``psola`` and
    ``harmonic`` pass their own); envelope warp, EQ, whisper and the inverse STFT are the same for every renderer."""
    grid = a.grid
    env = formant_warped(a.log_env, c.formant)
    eq = c.eq_db.unsqueeze(1) * (math.log(10.0) / 20.0)
    out = a.spec * torch.exp(eq)
    if bool(c.moves_pitch.any()):
        out = torch.where(c.moves_pitch.view(-1, 1, 1), (mover or _moved)(a, c, env) * torch.exp(eq), out)
    if bool(c.whisper.any()):
        out = torch.where(c.whisper.view(-1, 1, 1), _whisper(a, env, eq, seed), out)
    window = _window(grid, a.spec.device)
    length = int(a.lengths.max())
    return torch.istft(out.transpose(1, 2), grid.n_fft, grid.hop, window=window, center=True, length=length)


def _moved(a: Analysis, c: Controls, env: torch.Tensor) -> torch.Tensor:
    """Pitch moved (B, T, K): time-stretch by each frame's ratio, read back at the original rate (pitch and
    formants both move by the ratio), then each frame's envelope replaced by ``env`` (the original, warped)."""
    ratio = pitch_ratio(a.f0, c)
    z, positions = stretch(a, ratio)
    return envelope_replaced(resample_back(z, positions, a.grid, int(a.lengths.max())), a, ratio, env)


def envelope_replaced(y: torch.Tensor, a: Analysis, ratio: torch.Tensor, env: torch.Tensor) -> torch.Tensor:
    """The frames (B, T, K) of ``y`` (B, N), whose pitch was moved by ``ratio``, with their own envelope (measured
    with a lifter for the new pitch) replaced by ``env``."""
    grid, t = a.grid, a.spec.shape[1]
    window = _window(grid, a.spec.device)
    spec = torch.stft(y, grid.n_fft, grid.hop, window=window, center=True, pad_mode="constant", return_complex=True)
    spec = spec.transpose(1, 2)[:, :t]
    median = voiced_median(a.f0)
    new_f0 = (median * ratio.median(dim=1).values).clamp_min(1.0)
    period = torch.where(median > 0, a.sample_rate / new_f0, torch.full_like(new_f0, a.sample_rate / 200.0))
    current = cepstral_envelope(torch.log(spec.abs() + _EPS), LIFTER_PERIODS * period, grid.n_fft)
    return spec * torch.exp((env - current).clamp(-6.0, 6.0))


def _whisper(a: Analysis, env: torch.Tensor, eq: torch.Tensor, seed: int) -> torch.Tensor:
    """Noise under a smoother, formant-warped envelope: speech with no voicing (B, T, K)."""
    grid = a.grid
    cutoff = torch.full((env.shape[0],), a.sample_rate / WHISPER_SMOOTH_HZ, device=env.device)
    smooth = cepstral_envelope(env, cutoff, grid.n_fft)
    noise = torch.zeros(env.shape[0], int(a.lengths.max()))
    for row, length in enumerate(a.lengths.tolist()):  # each row its own draw: a batch equals each row alone
        generator = torch.Generator(device="cpu").manual_seed(seed + 1)
        noise[row, : int(length)] = torch.randn(int(length), generator=generator)
    noise = noise.to(env.device)
    window = _window(grid, env.device)
    n = torch.stft(noise, grid.n_fft, grid.hop, window=window, center=True, pad_mode="constant", return_complex=True)
    n = n.transpose(1, 2)[:, : env.shape[1]] / window.square().sum().sqrt()
    return n * torch.exp(smooth + eq)
