"""How the built-in (signal-level) backend realises a ``Style``: ``style_adjust(style) -> StyleAdjust``.

The Piper backend cannot be told "sound sad"; it can only be given a duration scale, and its output
can be pitch-shifted, given a wider or narrower pitch contour, formant-scaled, made louder or softer,
brighter or darker, or whispered (voicing replaced by noise). Each emotion is a recipe over those
knobs, after the acoustic correlates reported for acted emotional speech (e.g. Scherer 2003; Juslin &
Laukka 2003): joy and anger raise pitch, widen its range and speed up; sadness lowers, narrows, slows
and softens; fear raises but narrows and hurries.

| emotion   | speed x | pitch st | range x | gain dB | tilt dB/oct | whisper |
|-----------|---------|----------|---------|---------|-------------|---------|
| neutral   | 1.00    | 0        | 1.00    | 0       | 0           | no      |
| happy     | 1.08    | +2.0     | 1.35    | +2      | +0.5        | no      |
| sad       | 0.85    | -2.0     | 0.70    | -4      | -1.0        | no      |
| angry     | 1.10    | +1.0     | 1.40    | +5      | +1.5        | no      |
| surprised | 1.05    | +4.0     | 1.60    | +2      | +0.5        | no      |
| fearful   | 1.12    | +2.5     | 0.80    | -3      | -0.5        | no      |
| disgusted | 0.88    | -1.5     | 0.90    | -1      | -0.5        | no      |
| calm      | 0.93    | -0.5     | 0.80    | -2      | -0.5        | no      |
| whisper   | 0.95    | 0        | 1.00    | -4      | 0           | yes     |

Age and gender move pitch and formants (a child's vocal tract is shorter, so its formants sit higher):

| voice       | pitch st | range x | formant x | speed x | tilt dB/oct |
|-------------|----------|---------|-----------|---------|-------------|
| child       | +5.0     | 1.15    | 1.12      | 1.00    | +0.5        |
| young adult | +0.5     | 1.05    | 1.02      | 1.03    | 0           |
| middle-aged | -0.5     | 1.00    | 0.99      | 1.00    | 0           |
| elderly     | -1.5     | 0.85    | 0.97      | 0.90    | -1.0        |
| female      | +4.0     | 1.10    | 1.10      | 1.00    | 0           |
| male        | -3.0     | 0.95    | 0.93      | 1.00    | 0           |

Combining: an explicit ``speed`` replaces the recipe and age speeds; pitch and gain add; range and
formant factors multiply; tilt = 0.2 dB/oct per dB of explicit volume (loud is brighter) plus recipe
and age tilt. Age and gender are shifts relative to the voice: pass the voice's own gender/age and a
request that matches it adds nothing ("female" on a female prompt does not raise the pitch again).
For a child, the gender shift is halved (boys' and girls' voices differ little before puberty).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from voicelab.instruct.style import Age, Emotion, Gender, Style


@dataclass(frozen=True)
class EmotionRecipe:
    speed: float
    pitch_semitones: float
    pitch_range: float
    gain_db: float
    tilt_db_per_octave: float
    whisper: bool = False


@dataclass(frozen=True)
class VoiceShift:
    """What an age or gender request does to the voice."""

    pitch_semitones: float = 0.0
    pitch_range: float = 1.0
    formant_factor: float = 1.0
    speed: float = 1.0
    tilt_db_per_octave: float = 0.0


@dataclass(frozen=True)
class StyleAdjust:
    """Signal-level settings for one style.

    length_scale_factor: multiplies the backend's duration scale (>1 = slower speech).
    pitch_semitones: pitch shift; pitch_range: factor on F0 excursions around the mean.
    formant_factor: spectral-envelope scale (>1 = shorter vocal tract, brighter, younger/female).
    gain_db: loudness change; tilt_db_per_octave: spectral slope change (>0 = brighter).
    whisper: replace voicing with breath noise. notes: one line per contribution, for the UI and logs.
    """

    length_scale_factor: float = 1.0
    pitch_semitones: float = 0.0
    pitch_range: float = 1.0
    formant_factor: float = 1.0
    gain_db: float = 0.0
    tilt_db_per_octave: float = 0.0
    whisper: bool = False
    notes: tuple[str, ...] = ()

    @property
    def is_identity(self) -> bool:
        """True when nothing needs doing to the audio or the durations."""
        return (
            self.length_scale_factor == 1.0
            and self.pitch_semitones == 0.0
            and self.pitch_range == 1.0
            and self.formant_factor == 1.0
            and self.gain_db == 0.0
            and self.tilt_db_per_octave == 0.0
            and not self.whisper
        )


NEUTRAL_RECIPE = EmotionRecipe(1.0, 0.0, 1.0, 0.0, 0.0)
_RECIPES: Mapping[Emotion, EmotionRecipe] = MappingProxyType(
    {
        Emotion.NEUTRAL: NEUTRAL_RECIPE,
        Emotion.HAPPY: EmotionRecipe(1.08, 2.0, 1.35, 2.0, 0.5),
        Emotion.SAD: EmotionRecipe(0.85, -2.0, 0.70, -4.0, -1.0),
        Emotion.ANGRY: EmotionRecipe(1.10, 1.0, 1.40, 5.0, 1.5),
        Emotion.SURPRISED: EmotionRecipe(1.05, 4.0, 1.60, 2.0, 0.5),
        Emotion.FEARFUL: EmotionRecipe(1.12, 2.5, 0.80, -3.0, -0.5),
        Emotion.DISGUSTED: EmotionRecipe(0.88, -1.5, 0.90, -1.0, -0.5),
        Emotion.CALM: EmotionRecipe(0.93, -0.5, 0.80, -2.0, -0.5),
        Emotion.WHISPER: EmotionRecipe(0.95, 0.0, 1.0, -4.0, 0.0, whisper=True),
    }
)
_AGE_SHIFTS: Mapping[Age, VoiceShift] = MappingProxyType(
    {
        Age.CHILD: VoiceShift(5.0, 1.15, 1.12, 1.0, 0.5),
        Age.YOUNG_ADULT: VoiceShift(0.5, 1.05, 1.02, 1.03, 0.0),
        Age.MIDDLE_AGED: VoiceShift(-0.5, 1.0, 0.99, 1.0, 0.0),
        Age.ELDERLY: VoiceShift(-1.5, 0.85, 0.97, 0.90, -1.0),
    }
)
_GENDER_SHIFTS: Mapping[Gender, VoiceShift] = MappingProxyType(
    {
        Gender.FEMALE: VoiceShift(4.0, 1.10, 1.10),
        Gender.MALE: VoiceShift(-3.0, 0.95, 0.93),
    }
)
TILT_PER_DB = 0.2
_LIMITS = {
    "length": (0.5, 2.0),
    "pitch": (-12.0, 12.0),
    "range": (0.3, 2.5),
    "formant": (0.8, 1.25),
    "gain": (-18.0, 12.0),
    "tilt": (-3.0, 3.0),
}


def emotion_recipes() -> Mapping[Emotion, EmotionRecipe]:
    """The recipe per emotion (read-only), for docs and the UI."""
    return _RECIPES


def voice_shifts() -> Mapping[Age | Gender, VoiceShift]:
    """The shift per age and gender (read-only), for docs and the UI."""
    return MappingProxyType({**_AGE_SHIFTS, **_GENDER_SHIFTS})


def style_adjust(style: Style, voice_gender: Gender | None = None, voice_age: Age | None = None) -> StyleAdjust:
    """The signal-level settings for ``style`` on a voice of ``voice_gender``/``voice_age`` (None = unknown)."""
    recipe = _RECIPES[style.emotion] if style.emotion is not None else NEUTRAL_RECIPE
    notes: list[str] = []
    if style.emotion is not None and recipe != NEUTRAL_RECIPE:
        notes.append(_recipe_note(style.emotion, recipe))
    shifts: list[VoiceShift] = []
    if style.age is not None and style.age != voice_age:
        shifts.append(_AGE_SHIFTS[style.age])
        notes.append(f"age {style.age.value}: {_shift_note(_AGE_SHIFTS[style.age])}")
    if style.gender is not None and style.gender != voice_gender:
        gender = _GENDER_SHIFTS[style.gender]
        if style.age is Age.CHILD:  # children's voices differ little by sex: half the shift
            gender = _scaled(gender, 0.5)
        shifts.append(gender)
        notes.append(f"gender {style.gender.value}: {_shift_note(gender)}")

    speed = style.speed if style.speed is not None else recipe.speed * math.prod(s.speed for s in shifts)
    volume = style.volume_db or 0.0
    pitch = (style.pitch_semitones or 0.0) + recipe.pitch_semitones + sum(s.pitch_semitones for s in shifts)
    pitch_range = (style.pitch_range or 1.0) * recipe.pitch_range * math.prod(s.pitch_range for s in shifts)
    tilt = TILT_PER_DB * volume + recipe.tilt_db_per_octave + sum(s.tilt_db_per_octave for s in shifts)
    return StyleAdjust(
        length_scale_factor=_limit("length", 1.0 / speed),
        pitch_semitones=_limit("pitch", pitch),
        pitch_range=_limit("range", pitch_range),
        formant_factor=_limit("formant", float(math.prod(s.formant_factor for s in shifts))),
        gain_db=_limit("gain", volume + recipe.gain_db),
        tilt_db_per_octave=_limit("tilt", tilt),
        whisper=recipe.whisper,
        notes=tuple(notes),
    )


def _scaled(shift: VoiceShift, k: float) -> VoiceShift:
    """``shift`` applied ``k`` times as strongly (factors scale in the log domain)."""
    return VoiceShift(
        pitch_semitones=shift.pitch_semitones * k,
        pitch_range=shift.pitch_range**k,
        formant_factor=shift.formant_factor**k,
        speed=shift.speed**k,
        tilt_db_per_octave=shift.tilt_db_per_octave * k,
    )


def _limit(name: str, value: float) -> float:
    low, high = _LIMITS[name]
    return round(max(low, min(high, float(value))), 4)


def _recipe_note(emotion: Emotion, r: EmotionRecipe) -> str:
    whisper = ", whispered" if r.whisper else ""
    return (
        f"emotion {emotion.value}: pitch {r.pitch_semitones:+.1f} st, range x{r.pitch_range:.2f}, "
        f"speed x{r.speed:.2f}, {r.gain_db:+.0f} dB, tilt {r.tilt_db_per_octave:+.1f} dB/oct{whisper}"
    )


def _shift_note(s: VoiceShift) -> str:
    return f"pitch {s.pitch_semitones:+.1f} st, range x{s.pitch_range:.2f}, formants x{s.formant_factor:.2f}"
