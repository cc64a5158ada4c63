"""``VoiceTransform``: how to move a synthesised voice (pitch, range, formants, EQ, loudness, whisper)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from voicelab.voice.analysis import LTAS_BANDS, band_centres_hz

EQ_LIMIT_DB = 12.0
TILT_PIVOT_HZ = 1000.0


@dataclass(frozen=True)
class VoiceTransform:
    """How to move a synthesised voice; ``identity()`` changes nothing.

    pitch_semitones: shift of the F0 level.  pitch_range: factor on log-F0 deviation from its median.
    f0_target_hz: when set, each utterance's median F0 is first moved to this value (then ``pitch_semitones``
        applies), so a matched voice lands on the prompt's pitch whatever the sentence's own median is.
    formant_factor: spectral-envelope frequency scale (>1 raises formants).
    eq_gains_db: gain per analysis band (``analysis.band_centres_hz()``), empty for flat; limited to +-12 dB.
    gain_db: loudness change relative to the input.  tilt_db_per_octave: spectral tilt around 1 kHz.
    whisper: render without voicing (all frames aperiodic).
    """

    pitch_semitones: float = 0.0
    pitch_range: float = 1.0
    f0_target_hz: float | None = None
    formant_factor: float = 1.0
    eq_gains_db: tuple[float, ...] = ()
    gain_db: float = 0.0
    tilt_db_per_octave: float = 0.0
    whisper: bool = False

    def __post_init__(self) -> None:
        skip = ("eq_gains_db", "whisper", "f0_target_hz")
        numbers = [getattr(self, f.name) for f in fields(self) if f.name not in skip]
        if not all(math.isfinite(v) for v in [*numbers, *self.eq_gains_db]):
            raise ValueError(f"VoiceTransform values must be finite: {self}")
        if not 0.0 < self.pitch_range <= 4.0:
            raise ValueError(f"pitch_range must be within (0, 4], got {self.pitch_range}")
        if self.f0_target_hz is not None and not 40.0 <= self.f0_target_hz <= 1000.0:
            raise ValueError(f"f0_target_hz must be within [40, 1000] Hz, got {self.f0_target_hz}")
        if not 0.5 <= self.formant_factor <= 2.0:
            raise ValueError(f"formant_factor must be within [0.5, 2], got {self.formant_factor}")
        if self.eq_gains_db and len(self.eq_gains_db) != LTAS_BANDS:
            raise ValueError(f"eq_gains_db needs {LTAS_BANDS} bands or none, got {len(self.eq_gains_db)}")

    @classmethod
    def identity(cls) -> VoiceTransform:
        return cls()

    @property
    def moves_pitch(self) -> bool:
        """Whether pitch, formants or voicing change (otherwise the frames keep their own phases)."""
        pitch = self.pitch_semitones != 0.0 or self.pitch_range != 1.0 or self.f0_target_hz is not None
        return pitch or self.formant_factor != 1.0 or self.whisper

    def composed_with(self, other: VoiceTransform) -> VoiceTransform:
        """``other`` on top of this one: pitch, gains and tilt add; range and formants multiply; whisper ORs.

        An F0 target set by ``other`` replaces this one's.
        """
        return VoiceTransform(
            pitch_semitones=self.pitch_semitones + other.pitch_semitones,
            pitch_range=min(4.0, self.pitch_range * other.pitch_range),
            f0_target_hz=other.f0_target_hz if other.f0_target_hz is not None else self.f0_target_hz,
            formant_factor=min(2.0, max(0.5, self.formant_factor * other.formant_factor)),
            eq_gains_db=_add_bands(self.eq_gains_db, other.eq_gains_db),
            gain_db=self.gain_db + other.gain_db,
            tilt_db_per_octave=self.tilt_db_per_octave + other.tilt_db_per_octave,
            whisper=self.whisper or other.whisper,
        )


def _add_bands(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
    if not a or not b:
        return a or b
    return tuple(x + y for x, y in zip(a, b, strict=True))


def eq_curve_db(freqs: np.ndarray, eq_gains_db: tuple[float, ...], tilt_db_per_octave: float) -> np.ndarray:
    """Gain in dB at ``freqs``: band gains interpolated on a log-frequency axis (flat beyond the ends) plus tilt."""
    curve = np.zeros_like(freqs, dtype=np.float64)
    log_f = np.log2(np.maximum(freqs, 20.0))
    if eq_gains_db:
        gains = np.clip(np.asarray(eq_gains_db, dtype=np.float64), -EQ_LIMIT_DB, EQ_LIMIT_DB)
        curve += np.interp(log_f, np.log2(band_centres_hz()), gains)
    if tilt_db_per_octave:
        curve += tilt_db_per_octave * np.clip(log_f - math.log2(TILT_PIVOT_HZ), -4.0, 4.0)
    return curve
