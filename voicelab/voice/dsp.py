"""Signal-level voice transforms, a batch at a time: pitch level and range, formants, whisper, EQ, loudness.

Six renderers move pitch and formants: ``pulse`` (``voice.pulse``: WORLD's analysis and synthesis in PyTorch on
the caller's device, the default on a GPU), ``world`` (the same through pyworld on the CPU, ``voice.world_render``,
the default on a CPU), ``torch`` (``voice.spectral``: STFT, cepstral envelope, phase-vocoder stretch and
resampling), ``psola`` and ``harmonic`` (``spectral``'s steps with the pitch moved otherwise) and ``mel``
(``voice.mel_render``: re-voiced by HiFi-GAN). Loudness and the peak limiter run in PyTorch for all.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from voicelab.voice import harmonic, mel_render, psola, pulse, spectral, world_render
from voicelab.voice.mel import MEL_RATE
from voicelab.voice.transform import EQ_LIMIT_DB, VoiceTransform, eq_curve_db

__all__ = ["EQ_LIMIT_DB", "RENDERERS", "VoiceTransform", "apply_transform", "apply_transforms", "transform_batch"]

# world: WORLD on the CPU (numpy); on the device: torch (voice.spectral), psola (voice.psola: its pitch by TD-PSOLA),
# harmonic (voice.harmonic: voiced frames re-excited at the new pitch), mel (voice.mel_render: HiFi-GAN),
# pulse (voice.pulse: WORLD's analysis and synthesis in PyTorch)
RENDERERS = ("torch", "world", "psola", "harmonic", "mel", "pulse")
PEAK_CEILING = 0.97
LIMITER_WINDOW_S = 0.005
_MIN_MOVE_S = 0.1  # shorter pieces are only equalised and levelled


def _eq_bins(t: VoiceTransform, sr: int, n_fft: int) -> np.ndarray:
    freqs = np.fft.rfftfreq(n_fft, 1.0 / sr)
    return eq_curve_db(freqs, t.eq_gains_db, t.tilt_db_per_octave)


def controls_for(transforms: Sequence[VoiceTransform], sr: int, device: torch.device) -> spectral.Controls:
    """The per-row tensors of a batch of transforms."""
    grid = spectral.Grid.for_rate(sr)

    def column(values: Sequence[float]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.float32, device=device)

    return spectral.Controls(
        semitones=column([t.pitch_semitones for t in transforms]),
        pitch_range=column([t.pitch_range for t in transforms]),
        target_hz=column([math.nan if t.f0_target_hz is None else t.f0_target_hz for t in transforms]),
        formant=column([t.formant_factor for t in transforms]),
        eq_db=torch.from_numpy(np.stack([_eq_bins(t, sr, grid.n_fft) for t in transforms])).float().to(device),
        whisper=torch.tensor([t.whisper for t in transforms], device=device),
        moves_pitch=torch.tensor([t.moves_pitch for t in transforms], device=device),
    )


def active_rms_db(x: torch.Tensor, lengths: torch.Tensor, sr: int) -> torch.Tensor:
    """``analysis.active_rms_dbfs`` per row of a padded batch (B,): RMS of frames within 40 dB of the loud ones."""
    hop, win = max(1, round(0.010 * sr)), max(1, round(0.030 * sr))
    frames = F.pad(x, (win // 2, win)).unfold(-1, win, hop)
    level = 10.0 * torch.log10(frames.square().mean(-1).clamp_min(1e-12))
    n = level.shape[-1]
    inside = torch.arange(n, device=x.device).unsqueeze(0) < torch.ceil(lengths / hop).unsqueeze(-1)
    masked = torch.where(inside, level, torch.full_like(level, float("nan")))
    reference = torch.nanquantile(masked, 0.98, dim=-1, keepdim=True)
    active = inside & (level > torch.clamp(reference - 40.0, min=-70.0))
    power = torch.where(active, 10.0 ** (level / 10.0), torch.zeros_like(level)).sum(-1)
    count = active.sum(-1)
    return torch.where(count > 0, 10.0 * torch.log10(power / count.clamp_min(1)), torch.full_like(power, -math.inf))


def limit_peaks(x: torch.Tensor, sr: int, ceiling: float = PEAK_CEILING) -> torch.Tensor:
    """Smooth peak limiter per row (B, N): a gain that never lets |sample| pass ``ceiling``, eased over ~5 ms."""
    width = max(2, int(LIMITER_WINDOW_S * sr))
    half = width // 2
    envelope = F.max_pool1d(x.abs().unsqueeze(1), 2 * width + 1, 1, width).squeeze(1)
    gain = torch.clamp(ceiling / envelope.clamp_min(1e-12), max=1.0)
    gain = -F.max_pool1d(-gain.unsqueeze(1), 2 * half + 1, 1, half)
    gain = F.avg_pool1d(gain, 2 * half + 1, 1, half, count_include_pad=False).squeeze(1)
    return torch.clamp(x * gain, -ceiling, ceiling)


def transform_batch(
    x: torch.Tensor,
    lengths: torch.Tensor,
    sr: int,
    transforms: Sequence[VoiceTransform],
    seed: int = 0,
    analysis: spectral.Analysis | pulse.PulseFeatures | world_render.WorldFeatures | None = None,
    renderer: str = "torch",
    analyser: pulse.Analyser = pulse.analyse,
) -> torch.Tensor:
    """A padded batch (B, N) with one transform per row, on its own device; float32, within [-1, 1].

    ``analysis`` reuses ``spectral.analyse`` (``pulse.analyse`` for ``pulse``, ``world_render.analyse_world`` of its
    one row for ``world``) of this very batch (the matcher renders one utterance many times); without it,
    ``analyser`` makes ``pulse``'s (``pulse_graphs`` replays it).
    """
    if renderer not in RENDERERS:
        raise ValueError(f"Unknown voice renderer {renderer!r}; use one of {', '.join(RENDERERS)}.")
    with torch.inference_mode():
        x = torch.nan_to_num(x.float())
        level = active_rms_db(x, lengths, sr)
        if renderer == "world":
            world = analysis if isinstance(analysis, world_render.WorldFeatures) else None
            out = _world_batch(x, lengths, sr, transforms, world)
        elif renderer in ("mel", "pulse"):
            features = analysis if isinstance(analysis, pulse.PulseFeatures) else None
            out = _resynthesised_batch(x, lengths, sr, transforms, seed, renderer, features, analyser)
        else:
            spectra = analysis if isinstance(analysis, spectral.Analysis) else None
            out = _torch_batch(x, lengths, sr, transforms, seed, spectra, renderer)
        inside = torch.arange(x.shape[-1], device=x.device).unsqueeze(0) < lengths.unsqueeze(-1)
        out = torch.where(inside, out, torch.zeros_like(out))
        gain = torch.tensor([t.gain_db for t in transforms], device=x.device)
        change = torch.nan_to_num(level + gain - active_rms_db(out, lengths, sr), nan=0.0, posinf=0.0, neginf=0.0)
        return limit_peaks(out * (10.0 ** (change / 20.0)).unsqueeze(-1), sr)


def _torch_batch(
    x: torch.Tensor,
    lengths: torch.Tensor,
    sr: int,
    transforms: Sequence[VoiceTransform],
    seed: int,
    analysis: spectral.Analysis | None,
    renderer: str = "torch",
) -> torch.Tensor:
    controls = controls_for(transforms, sr, x.device)
    short = lengths < _MIN_MOVE_S * sr
    controls = spectral.Controls(
        **{**controls.__dict__, "moves_pitch": controls.moves_pitch & ~short, "whisper": controls.whisper & ~short}
    )
    analysed = analysis or spectral.analyse(x, lengths, sr)
    if renderer == "psola":
        return psola.render(x, analysed, controls, seed)[:, : x.shape[-1]]
    if renderer == "harmonic":
        return harmonic.render(x, analysed, controls, seed)[:, : x.shape[-1]]
    return spectral.render(analysed, controls, seed)[:, : x.shape[-1]]


def _resynthesised_batch(
    x: torch.Tensor,
    lengths: torch.Tensor,
    sr: int,
    transforms: Sequence[VoiceTransform],
    seed: int,
    renderer: str,
    features: pulse.PulseFeatures | None = None,
    analyser: pulse.Analyser = pulse.analyse,
) -> torch.Tensor:
    """Rows that move pitch or formants made anew (HiFi-GAN for ``mel``, WORLD's pulses for ``pulse``); the rest
    (EQ only, whispers, pieces under 0.1 s) through the STFT renderer, which keeps their own phases (a whisper has
    no harmonics to move)."""
    vocoded = [
        row
        for row, (n, t) in enumerate(zip(lengths.tolist(), transforms, strict=True))
        if t.moves_pitch and not t.whisper and n >= _MIN_MOVE_S * sr
    ]
    rest = [row for row in range(len(transforms)) if row not in vocoded]
    out = torch.zeros_like(x)
    if rest:  # trimmed to their own longest row: the STFT renderer reads the batch's width as the rows' length
        index = torch.tensor(rest, device=x.device)
        width = int(lengths[index].max())
        kept = _torch_batch(x[index][:, :width], lengths[index], sr, [transforms[r] for r in rest], seed, None)
        out[index, :width] = kept
    if vocoded:
        index = torch.tensor(vocoded, device=x.device)
        rows = x[index][:, : int(lengths[index].max())]
        chosen = [transforms[r] for r in vocoded]
        if renderer == "pulse":
            reuse = features if len(vocoded) == len(transforms) else None  # the analysis is of the whole batch
            controls = controls_for(chosen, sr, x.device)
            moved = pulse.render(rows, lengths[index], sr, controls, seed, reuse, analyser)
        else:
            controls = controls_for(chosen, MEL_RATE, x.device)
            moved = mel_render.render(rows, sr, controls, mel_render.vocoder_on(str(x.device)))
        out[index, : moved.shape[-1]] = moved
    return out


def _world_batch(
    x: torch.Tensor,
    lengths: torch.Tensor,
    sr: int,
    transforms: Sequence[VoiceTransform],
    features: world_render.WorldFeatures | None = None,
) -> torch.Tensor:
    """Each row through WORLD on the CPU. ``features``: ``analyse_world`` of a one-row batch's audio, made once by
    a caller that renders that audio many times (the matcher's search); analysing it again for every rendering
    gave the same parameters, at about the rendering's own cost."""
    assert features is None or x.shape[0] == 1, "WORLD features describe one utterance"
    rows = x.cpu().numpy()
    out = torch.zeros_like(x)
    for row, (n, t) in enumerate(zip(lengths.tolist(), transforms, strict=True)):
        rendered = world_render.render_full(rows[row, :n], sr, t, features)
        out[row, :n] = torch.from_numpy(np.ascontiguousarray(rendered, dtype=np.float32)).to(x.device)
    return out


def padded_rows(pieces: Sequence[np.ndarray], width: Callable[[int], int] | None = None) -> torch.Tensor:
    """The pieces as rows of one zero-padded float32 batch on the CPU (B, the longest or ``width`` of it, at least
    1)."""
    longest = max([len(p) for p in pieces] + [1])
    batch = np.zeros((len(pieces), width(longest) if width else longest), dtype=np.float32)
    for row, piece in enumerate(pieces):
        batch[row, : len(piece)] = piece
    return torch.from_numpy(batch)


def apply_transforms(
    pieces: Sequence[np.ndarray],
    sr: int,
    transforms: Sequence[VoiceTransform],
    device: str | torch.device = "cpu",
    renderer: str = "torch",
    analyser: pulse.Analyser = pulse.analyse,
    seed: int = 0,
) -> list[np.ndarray]:
    """Each piece with its transform, as one padded batch on ``device``; float32 arrays of the same lengths
    (``analyser``: how ``pulse`` analyses the batch; ``seed``: the renderer's noise)."""
    lengths = [len(p) for p in pieces]
    if not pieces or max(lengths) == 0:
        return [np.zeros(n, dtype=np.float32) for n in lengths]
    lengths_t = torch.tensor(lengths, device=device)
    x = padded_rows(pieces).to(device)
    out = transform_batch(x, lengths_t, sr, transforms, seed, renderer=renderer, analyser=analyser).cpu().numpy()
    return [np.ascontiguousarray(out[row, :n]) for row, n in enumerate(lengths)]


def apply_transform(
    audio: np.ndarray,
    sr: int,
    t: VoiceTransform,
    device: str | torch.device = "cpu",
    renderer: str = "torch",
    analyser: pulse.Analyser = pulse.analyse,
    seed: int = 0,
) -> np.ndarray:
    """The transformed audio, float32 within [-1, 1] (one row of ``apply_transforms``)."""
    return apply_transforms([np.asarray(audio, dtype=np.float32)], sr, [t], device, renderer, analyser, seed)[0]
