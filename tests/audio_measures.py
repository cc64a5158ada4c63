"""Measurements of synthesised speech for the audio tests: what a listener would notice, in numbers.

Deliberately independent of ``voicelab.voice.analysis`` so the tests do not grade the code with its own
ruler: pitch comes from Praat's cross-correlation tracker (the code under test uses the autocorrelation
one), searched from 50 Hz so a lowered male voice (~70 Hz) is still tracked, and levels are plain numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import parselmouth

FRAME_S = 0.01
WINDOW_S = 0.03
PITCH_FLOOR_HZ = 50.0
PITCH_CEILING_HZ = 600.0
SPEECH_RANGE_DB = 35.0  # frames within this much of the loudest frame count as speech


@dataclass(frozen=True)
class Measures:
    """duration_s: whole output. f0_median_hz: median over voiced frames (0 if none).
    voiced_ratio: share of speech frames Praat calls voiced. speech_rms_dbfs: RMS level of the speech frames.
    """

    duration_s: float
    f0_median_hz: float
    voiced_ratio: float
    speech_rms_dbfs: float


def semitones(f_hz: float, ref_hz: float) -> float:
    return 12.0 * math.log2(f_hz / ref_hz)


def frame_levels_db(audio: np.ndarray, sr: int, times: np.ndarray) -> np.ndarray:
    """RMS level (dBFS) of 30 ms windows centred on ``times``."""
    half = round(WINDOW_S * sr / 2)
    x = np.pad(np.asarray(audio, dtype=np.float64), half)
    power = np.concatenate(([0.0], np.cumsum(x**2)))
    centres = np.clip(np.round(times * sr).astype(int), 0, len(audio)) + half
    energy = (power[centres + half] - power[centres - half]) / (2 * half)
    return np.asarray(10.0 * np.log10(np.maximum(energy, 1e-12)))


def measure(audio: np.ndarray, sr: int) -> Measures:
    sound = parselmouth.Sound(np.asarray(audio, dtype=np.float64), sampling_frequency=float(sr))
    pitch = sound.to_pitch_cc(time_step=FRAME_S, pitch_floor=PITCH_FLOOR_HZ, pitch_ceiling=PITCH_CEILING_HZ)
    f0 = np.nan_to_num(pitch.selected_array["frequency"])
    levels = frame_levels_db(audio, sr, np.asarray(pitch.xs()))
    speech = levels > levels.max() - SPEECH_RANGE_DB
    voiced = f0 > 0
    return Measures(
        duration_s=len(audio) / sr,
        f0_median_hz=float(np.median(f0[voiced])) if voiced.any() else 0.0,
        voiced_ratio=float(voiced[speech].mean()) if speech.any() else 0.0,
        speech_rms_dbfs=float(10.0 * np.log10(np.mean(10.0 ** (levels[speech] / 10.0)))),
    )
