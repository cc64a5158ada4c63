"""What a style did to the audio, measured: duration, median pitch and loudness against the unstyled voice.

The reference for pitch and loudness is the backend's unstyled output of the same text (the draft), except
where the model itself shifted the pitch; there, and for duration (the backend applies speed itself, so no
unstyled duration exists), the reference is the voice's neutral figures measured once on a fixed sentence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from voicelab.instruct.check import StyleCheck
from voicelab.voice.analysis import FRAME_S, active_frames, active_rms_dbfs, frame_levels_db
from voicelab.voice.matcher import median_f0


@dataclass(frozen=True)
class NeutralVoice:
    """A backend voice without any style: median F0 (Hz) and speech seconds per letter or character."""

    f0_hz: float
    seconds_per_unit: float


@dataclass(frozen=True)
class Requested:
    """What the style asks, relative to the voice: duration factor, pitch change (st), loudness change (dB)."""

    duration_x: float
    pitch_st: float
    loudness_db: float


def spoken_units(text: str) -> int:
    """Letters, digits and CJK characters: what the speaking rate is counted in."""
    return sum(1 for ch in text if ch.isalnum())


def speech_seconds(audio: np.ndarray, sr: int) -> float:
    """Seconds of active speech (frames within 40 dB of the loud ones)."""
    return float(active_frames(frame_levels_db(audio, sr)).sum()) * FRAME_S


def neutral_voice(audio: np.ndarray, sr: int, text: str, device: str = "cpu") -> NeutralVoice:
    """The neutral figures of a voice from its rendering of ``text``."""
    return NeutralVoice(median_f0(audio, sr, device), speech_seconds(audio, sr) / max(1, spoken_units(text)))


def _semitones(f_hz: float, ref_hz: float) -> float:
    return 12.0 * math.log2(f_hz / ref_hz) if f_hz > 0 and ref_hz > 0 else 0.0


def check_style(
    draft: np.ndarray,
    output: np.ndarray,
    sr: int,
    text: str,
    requested: Requested,
    neutral: NeutralVoice,
    pitch_reference_hz: float | None,
    device: str = "cpu",
) -> StyleCheck:
    """Requested beside measured; ``pitch_reference_hz`` None: the draft's own median F0 is the reference."""
    expected_s = neutral.seconds_per_unit * max(1, spoken_units(text))
    reference = pitch_reference_hz if pitch_reference_hz else median_f0(draft, sr, device)
    loudness = active_rms_dbfs(output, sr) - active_rms_dbfs(draft, sr)
    return StyleCheck(
        requested_duration_x=round(requested.duration_x, 3),
        measured_duration_x=round(speech_seconds(output, sr) / expected_s, 3) if expected_s > 0 else 1.0,
        requested_pitch_st=round(requested.pitch_st, 2),
        measured_pitch_st=round(_semitones(median_f0(output, sr, device), reference), 2),
        requested_loudness_db=round(requested.loudness_db, 2),
        measured_loudness_db=round(loudness, 2) if math.isfinite(loudness) else 0.0,
        pitch_estimated=pitch_reference_hz is not None,
    )
