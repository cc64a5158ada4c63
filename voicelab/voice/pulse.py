"""The ``pulse`` renderer: WORLD's source-filter resynthesis in batched PyTorch, on the worker's device.

WORLD's method scores highest with the judges because it re-excites every harmonic at the new pitch: one
minimum-phase pulse per period, shaped by a spectral envelope measured with an F0-adaptive window (so the old
harmonics are not in it), plus noise shaped by the same envelope where the aperiodicity says the band is noisy. The
``world`` renderer does it through pyworld on the host, a frame and a pulse at a time; here the analysis (YIN's F0,
``world_analysis``'s CheapTrick and D4C) and the synthesis (every pulse's response in one batch of FFTs, laid down
by one scatter-add) run where the voice was made. The synthesis follows WORLD's: pulses where the integrated F0
passes a whole cycle (500 Hz apart where unvoiced), a fractional-sample delay each, the periodic part shaped by the
envelope times (1 - aperiodicity^2), the aperiodic part a period of white noise shaped by the envelope times
aperiodicity^2, both minimum phase.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from voicelab.voice import spectral
from voicelab.voice.pitch import yin_f0
from voicelab.voice.shapes import rounded_up
from voicelab.voice.world_analysis import DEFAULT_F0, cheaptrick, cheaptrick_fft_size, d4c

FRAME_S = 0.005
# YIN's voicing for resynthesis: a frame called unvoiced gets noise pulses under the full envelope (a hoarse gap), so
# the track follows Praat's voicing (what the ``world`` renderer resynthesises from) as closely as YIN can: a dip
# below 0.45 (YIN's default 0.35 agreed with Praat on 84.6 % of the built-in voice's frames, 0.45 on 88.0 %),
# then gaps and islands of up to two frames closed and removed (88.5 %).
VOICING_DIP = 0.45
VOICING_RUN = 3
# Every FFT here is batched over frames or pulses, whose counts follow the text; rounded up to these steps, the
# transforms' shapes recur from request to request, so cuFFT plans (milliseconds each to build) are mostly reused:
# the H200 soak's p95 went 0.26-0.30 -> 0.15-0.25 s with the rounding (docs/benchmarks.md).
FRAME_BUCKET = 64
PULSE_BUCKET = 256
SAMPLE_BUCKET = 8192
_SAFE_APERIODICITY = (0.001, 0.999999999999)
_GUARD = 1e-12


@dataclass(frozen=True)
class PulseFeatures:
    """WORLD's parameters of a padded batch: F0 (B, T), power envelope and aperiodicity (B, T, K), frame hop."""

    f0: torch.Tensor
    envelope: torch.Tensor
    aperiodicity: torch.Tensor
    lengths: torch.Tensor
    sample_rate: int
    hop: int


Analyser = Callable[[torch.Tensor, torch.Tensor, int], PulseFeatures]  # ``analyse`` or one that replays it


def analysis_frames(lengths: torch.Tensor, hop: int) -> int:
    """How many frames ``analyse`` makes of a batch: its longest row's, rounded up (frames past a row's end are
    never read). Reads ``lengths`` on the host."""
    return rounded_up(int(lengths.max()) // hop + 1, FRAME_BUCKET)


def analyse(x: torch.Tensor, lengths: torch.Tensor, sr: int, frames: int | None = None) -> PulseFeatures:
    """YIN's F0 every 5 ms, and CheapTrick's envelope and D4C's aperiodicity on those frames; ``frames`` (at least
    ``analysis_frames``) given, nothing leaves the device, so the call can be captured in a CUDA graph."""
    hop = round(FRAME_S * sr)
    frames = frames or analysis_frames(lengths, hop)
    x = F.pad(x, (0, max(0, frames * hop - x.shape[-1])))
    f0 = voicing_cleaned(yin_f0(x, sr, hop, VOICING_DIP)[:, :frames])
    positions = (torch.arange(frames, device=x.device, dtype=torch.float32) * hop / sr).expand_as(f0)
    fft_size = cheaptrick_fft_size(sr)
    envelope = cheaptrick(x, lengths, sr, f0, positions, fft_size)
    aperiodicity = d4c(x, lengths, sr, f0, positions, fft_size)
    return PulseFeatures(f0, envelope, aperiodicity, lengths, sr, hop)


def voicing_cleaned(f0: torch.Tensor) -> torch.Tensor:
    """An F0 track (B, T) with unvoiced gaps shorter than ``VOICING_RUN`` frames filled from their neighbours and
    voiced islands that short removed (a morphological closing, then an opening, of the voiced mask; outside the
    track counts as unvoiced)."""
    half = VOICING_RUN // 2

    def grow(mask: torch.Tensor) -> torch.Tensor:
        return F.max_pool1d(F.pad(mask, (half, half)).unsqueeze(1), VOICING_RUN, 1).squeeze(1)

    def shrink(mask: torch.Tensor) -> torch.Tensor:
        return -F.max_pool1d(-F.pad(mask, (half, half)).unsqueeze(1), VOICING_RUN, 1).squeeze(1)

    margin = VOICING_RUN
    voiced = F.pad((f0 > 0).float(), (margin, margin))
    closed = shrink(grow(voiced))[:, margin:-margin]
    kept = grow(shrink(closed)) > 0
    nearest = F.max_pool1d(f0.unsqueeze(1), 2 * VOICING_RUN - 1, 1, VOICING_RUN - 1).squeeze(1)
    return torch.where(kept, torch.where(f0 > 0, f0, nearest), torch.zeros_like(f0))


def render(
    x: torch.Tensor,
    lengths: torch.Tensor,
    sr: int,
    c: spectral.Controls,
    seed: int = 0,
    features: PulseFeatures | None = None,
    analyser: Analyser = analyse,
) -> torch.Tensor:
    """Every row (B, N) resynthesised at its new pitch under its formant-warped envelope, then equalised;
    ``features`` reuses ``analyse`` of this very batch, ``analyser`` makes it (``pulse_graphs`` replays it)."""
    features = features or analyser(x, lengths, sr)
    ratio = spectral.pitch_ratio(features.f0, c)
    f0 = torch.where(features.f0 > 0, features.f0 * ratio, torch.zeros_like(features.f0))
    out = synthesise(features, f0, warp_envelope(features.envelope, c.formant), seed)
    return equalise(out, sr, c.eq_db)


def equalise(y: torch.Tensor, sr: int, eq_db: torch.Tensor) -> torch.Tensor:
    """Each row (B, N) through its gain per STFT bin of ``spectral``'s grid (B, K), zero phase."""
    grid = spectral.Grid.for_rate(sr)
    window = torch.hann_window(grid.n_fft, periodic=True, device=y.device)
    n = y.shape[-1]
    padded = F.pad(y, (0, rounded_up(n, SAMPLE_BUCKET) - n))
    spec = torch.stft(padded, grid.n_fft, grid.hop, window=window, pad_mode="constant", return_complex=True)
    spec = spec * torch.exp(eq_db * (math.log(10.0) / 20.0)).unsqueeze(-1)
    return torch.istft(spec, grid.n_fft, grid.hop, window=window, center=True, length=padded.shape[-1])[:, :n]


def warp_envelope(envelope: torch.Tensor, formant: torch.Tensor) -> torch.Tensor:
    """Each frame's power envelope read at f / ``formant`` (B,), in the log domain."""
    return torch.exp(spectral.formant_warped(torch.log(envelope.clamp_min(1e-30)), formant))


@dataclass(frozen=True)
class Pulses:
    """Where each pulse goes: its row, sample, fractional delay (samples), voicing and period (samples); ``real`` is
    False for the silent pulses that round the count up to ``PULSE_BUCKET``."""

    row: torch.Tensor
    sample: torch.Tensor
    delay: torch.Tensor
    voiced: torch.Tensor
    period: torch.Tensor
    real: torch.Tensor


def pulse_times(f0: torch.Tensor, lengths: torch.Tensor, hop: int, sr: int, n: int | None = None) -> Pulses:
    """One pulse per cycle of the F0 track (B, T) interpolated per sample; 500 Hz where unvoiced. Each row stops at
    its own length and its own last frame, so a row in a padded batch gets the pulses it gets alone; ``n`` is the
    longest row's length where the caller has read it already."""
    n = n or int(lengths.max())
    low, high, frac = _frame_pair(torch.arange(n, device=f0.device).expand(f0.shape[0], n), lengths, hop)
    track = f0.double()
    voicing = (track > 0).double()
    hz = track.gather(1, low) * (1 - frac) + track.gather(1, high) * frac
    voiced = (voicing.gather(1, low) * (1 - frac) + voicing.gather(1, high) * frac) > 0.5
    hz = torch.where(voiced, hz, torch.full_like(hz, DEFAULT_F0))
    wrapped = torch.remainder(torch.cumsum(2.0 * math.pi * hz / sr, -1), 2.0 * math.pi)
    jumps = (wrapped[:, 1:] - wrapped[:, :-1]).abs() > math.pi
    jumps &= torch.arange(n - 1, device=f0.device) < (lengths - 1).unsqueeze(-1)
    row, sample = torch.nonzero(jumps, as_tuple=True)
    before = wrapped[row, sample] - 2.0 * math.pi
    after = wrapped[row, sample + 1]
    delay = -before / (after - before)
    following = torch.cat([sample[1:], sample[-1:]])
    same_row = torch.cat([row[1:] == row[:-1], row.new_zeros(1, dtype=torch.bool)])[: len(row)]
    period = torch.where(same_row, following - sample, torch.zeros_like(sample))
    fields = (row, sample, delay.float(), voiced[row, sample], period, torch.ones_like(row, dtype=torch.bool))
    spare = rounded_up(len(row), PULSE_BUCKET) - len(row)  # silent pulses: no voicing, no noise, at row 0's start
    return Pulses(*(F.pad(field, (0, spare)) for field in fields))


def _frame_pair(sample: torch.Tensor, lengths: torch.Tensor, hop: int) -> tuple[torch.Tensor, ...]:
    """The frames either side of each sample (rows of ``sample`` are the batch's), clamped to the row's last frame,
    and the weight of the second."""
    last = (lengths // hop).view(-1, *([1] * (sample.dim() - 1))).expand_as(sample)
    position = sample.double() / hop
    low = torch.minimum(position.floor().long(), last)
    high = torch.minimum(low + 1, last)
    return low, high, position - low


def minimum_phase(log_amplitude: torch.Tensor, fft_size: int) -> torch.Tensor:
    """The minimum-phase spectrum (…, K) whose log amplitude is ``log_amplitude`` (…, K): the folded cepstrum.
    Its exponential as magnitude and angle: PyTorch's complex ``exp`` took 82 of the synthesis' 176 ms for 10.7 s on
    the development CPU, the real ``exp`` with ``polar`` a third of that (the same values within 2e-6)."""
    cepstrum = torch.fft.irfft(log_amplitude, fft_size)
    fold = torch.zeros(fft_size, device=log_amplitude.device, dtype=cepstrum.dtype)
    fold[0], fold[1 : fft_size // 2], fold[fft_size // 2] = 1.0, 2.0, 1.0
    spectrum = torch.fft.rfft(cepstrum * fold)
    return torch.polar(torch.exp(spectrum.real), spectrum.imag)


def _at_pulses(frames: torch.Tensor, p: Pulses, lengths: torch.Tensor, hop: int) -> torch.Tensor:
    """A frame track (B, T, K) linearly interpolated at each pulse's sample (P, K)."""
    low, high, frac = _frame_pair(p.sample, lengths[p.row], hop)
    weight = frac.float().unsqueeze(-1)
    return frames[p.row, low] * (1.0 - weight) + frames[p.row, high] * weight


def synthesise(features: PulseFeatures, f0: torch.Tensor, envelope: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """The waveform (B, N) from an F0 track (B, T) and a power envelope (B, T, K), with the analysis' aperiodicity."""
    sr, hop = features.sample_rate, features.hop
    fft_size = 2 * (envelope.shape[-1] - 1)
    b, n = f0.shape[0], int(features.lengths.max())
    f0 = torch.where(f0 < sr / fft_size + 1.0, torch.zeros_like(f0), f0)
    p = pulse_times(f0, features.lengths, hop, sr, n)
    spectrum = _at_pulses(envelope, p, features.lengths, hop)
    ratio = _at_pulses(features.aperiodicity, p, features.lengths, hop).clamp(*_SAFE_APERIODICITY).square()
    responses = _periodic(spectrum, ratio, p, fft_size) * p.period.float().sqrt().unsqueeze(-1)
    responses = responses + _aperiodic(spectrum, ratio, p, fft_size, seed)
    start = p.sample - fft_size // 2 + 1 + fft_size  # the buffer starts fft_size before sample 0
    start = start + p.row * (n + 2 * fft_size)  # rows laid end to end in one flat buffer
    index = start.unsqueeze(-1) + torch.arange(fft_size, device=f0.device)
    out = torch.zeros(b * (n + 2 * fft_size), device=f0.device)
    out.index_add_(0, index.reshape(-1), responses.reshape(-1))
    return out.view(b, n + 2 * fft_size)[:, fft_size : fft_size + n]


def _periodic(spectrum: torch.Tensor, ratio: torch.Tensor, p: Pulses, fft_size: int) -> torch.Tensor:
    """Each voiced pulse's minimum-phase response, delayed by its fraction of a sample, DC removed (P, fft_size)."""
    h = minimum_phase(0.5 * torch.log(spectrum * (1.0 - ratio) + _GUARD), fft_size)
    k = torch.arange(h.shape[-1], device=h.device, dtype=torch.float32)
    h = h * torch.polar(torch.ones_like(k), -2.0 * math.pi * p.delay.unsqueeze(-1) * k / fft_size)
    response = torch.fft.fftshift(torch.fft.irfft(h, fft_size), dim=-1)
    half = fft_size // 2
    dc = response[:, half:].sum(-1, keepdim=True)  # WORLD keeps the causal half and spreads -DC over both
    remover = _dc_remover(fft_size, h.device)
    response = torch.cat([-dc * remover[:half], response[:, half:] - dc * remover[half:]], -1)
    keep = p.voiced & (ratio[:, 0] <= 0.999)
    return torch.where(keep.unsqueeze(-1), response, torch.zeros_like(response))


def _dc_remover(fft_size: int, device: torch.device) -> torch.Tensor:
    """WORLD's raised-cosine DC remover, both halves, summing to one."""
    i = torch.arange(fft_size // 2, device=device, dtype=torch.float32)
    half = 0.5 - 0.5 * torch.cos(2.0 * math.pi * (i + 1.0) / (1.0 + fft_size))
    full = torch.cat([half, half.flip(0)])
    return full / (2.0 * half.sum())


def _aperiodic(spectrum: torch.Tensor, ratio: torch.Tensor, p: Pulses, fft_size: int, seed: int) -> torch.Tensor:
    """A period of zero-mean white noise per pulse through the aperiodic minimum-phase filter (P, fft_size)."""
    noise = _row_noise(p, fft_size, seed, spectrum.device)
    inside = torch.arange(fft_size, device=spectrum.device) < p.period.unsqueeze(-1)
    noise = torch.where(inside, noise, torch.zeros_like(noise))
    mean = noise.sum(-1, keepdim=True) / p.period.clamp_min(1).unsqueeze(-1)
    noise = torch.where(inside, noise - mean, noise)
    share = torch.where(p.voiced.unsqueeze(-1), ratio, torch.ones_like(ratio))
    h = minimum_phase(0.5 * torch.log(spectrum * share + _GUARD), fft_size)
    return torch.fft.fftshift(torch.fft.irfft(h * torch.fft.rfft(noise, fft_size), fft_size), dim=-1)


def _row_noise(p: Pulses, fft_size: int, seed: int, device: torch.device) -> torch.Tensor:
    """White noise (P, fft_size): each row's real pulses their own draw from ``seed``, so a row in a batch gets what
    it gets alone; silent pulses get zeros. Pulses come sorted by row (``pulse_times``), so the draws are laid end
    to end, from one read of the counts (a loop over rows read the device twice a row)."""
    counts = torch.bincount(p.row[p.real]).tolist()
    draws = [
        torch.randn(count, fft_size, generator=torch.Generator(device=device).manual_seed(seed + 17), device=device)
        for count in counts
    ]
    spare = torch.zeros(len(p.sample) - sum(counts), fft_size, device=device)
    return torch.cat([*draws, spare])
