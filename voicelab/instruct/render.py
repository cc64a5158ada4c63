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

Age and gender are **targets relative to the voice**: the voice's own class (male or female adult, or a
child) is read from its median F0, and the target class's median F0 and formant scale replace it. The F0
target keeps half of the voice's own distance from its class (in log F0), so a low male voice asked for a
female voice lands in the female range (91 Hz -> ~183 Hz) without every voice sounding the same; formants
scale by the ratio of the classes' formant scales. An adult age within the voice's own gender moves the
voice's own pitch by the age's factor; a request for the voice's own class adds nothing.

| class          | median F0 (Hz) | formant scale | speed x | range x | tilt dB/oct |
|----------------|----------------|---------------|---------|---------|-------------|
| male adult     | 120            | 1.00          | 1.00    | 1.00    | 0           |
| female adult   | 210            | 1.17          | 1.00    | 1.00    | 0           |
| child (boy)    | 265            | 1.28          | 1.00    | 1.15    | +0.5        |
| child (girl)   | 285            | 1.30          | 1.00    | 1.15    | +0.5        |
| young adult    | +5 % of adult  | x1.01         | 1.03    | 1.05    | 0           |
| middle-aged    | -4 % of adult  | x0.99         | 1.00    | 1.00    | 0           |
| elderly        | male -3 %, female -12 % | x0.97 | 0.90 | 0.85    | -1.0        |

Combining: **explicit values win over the emotion recipe**: a style's own speed, pitch, range or volume
replaces the recipe's value for that attribute ("tired and a bit annoyed": volume -3 dB, not -3 + 5);
the recipe fills only what the style leaves unspecified. Explicit pitch applies on top of an age/gender
target. Tilt = 0.2 dB/oct per dB of volume (loud is brighter) plus recipe and age tilt.
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
class VoiceClass:
    """A speaker class: its typical median F0 and formant scale (male adult = 1)."""

    f0_hz: float
    formant: float


@dataclass(frozen=True)
class AgeManner:
    """What an age does besides pitch and formants."""

    speed: float = 1.0
    pitch_range: float = 1.0
    tilt_db_per_octave: float = 0.0


@dataclass(frozen=True)
class StyleAdjust:
    """Signal-level settings for one style.

    length_scale_factor: multiplies the backend's duration scale (>1 = slower speech).
    f0_target_hz: the median F0 an age/gender target moves the voice to (None: the voice's own).
    voice_pitch_st: that target's distance from the voice's own median, in semitones (0 without one).
    pitch_semitones: pitch shift on top; pitch_range: factor on F0 excursions around the mean.
    formant_factor: spectral-envelope scale (>1 = shorter vocal tract, brighter, younger/female).
    gain_db: loudness change; tilt_db_per_octave: spectral slope change (>0 = brighter).
    whisper: replace voicing with breath noise. notes: one line per contribution, for the UI and logs.
    """

    length_scale_factor: float = 1.0
    f0_target_hz: float | None = None
    voice_pitch_st: float = 0.0
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
            and self.f0_target_hz is None
            and self.pitch_semitones == 0.0
            and self.pitch_range == 1.0
            and self.formant_factor == 1.0
            and self.gain_db == 0.0
            and self.tilt_db_per_octave == 0.0
            and not self.whisper
        )

    @property
    def requested_pitch_st(self) -> float:
        """The whole pitch change asked of the voice: the age/gender target's plus the explicit shift."""
        return self.voice_pitch_st + self.pitch_semitones


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
MALE_ADULT = VoiceClass(120.0, 1.0)
FEMALE_ADULT = VoiceClass(210.0, 1.17)
_CHILD: Mapping[Gender, VoiceClass] = MappingProxyType(
    {Gender.MALE: VoiceClass(265.0, 1.28), Gender.FEMALE: VoiceClass(285.0, 1.30)}
)
# age -> (F0 factor for male, for female, formant factor) applied to the adult class
_AGE_CLASS: Mapping[Age, tuple[float, float, float]] = MappingProxyType(
    {
        Age.YOUNG_ADULT: (1.05, 1.05, 1.01),
        Age.MIDDLE_AGED: (0.96, 0.96, 0.99),
        Age.ELDERLY: (0.97, 0.88, 0.97),
    }
)
_AGE_MANNER: Mapping[Age, AgeManner] = MappingProxyType(
    {
        Age.CHILD: AgeManner(1.0, 1.15, 0.5),
        Age.YOUNG_ADULT: AgeManner(1.03, 1.05, 0.0),
        Age.MIDDLE_AGED: AgeManner(1.0, 1.0, 0.0),
        Age.ELDERLY: AgeManner(0.90, 0.85, -1.0),
    }
)
FEMALE_FROM_HZ = 160.0  # a voice whose median F0 is above this is taken as female
CHILD_FROM_HZ = 255.0  # ... and above this as a child
TARGET_KEEPS = 0.5  # share of the voice's own log-F0 distance from its class that the target keeps
TILT_PER_DB = 0.2
_LIMITS = {
    "length": (0.5, 2.0),
    "pitch": (-12.0, 12.0),
    "range": (0.3, 2.5),
    "formant": (0.75, 1.35),
    "gain": (-18.0, 12.0),
    "tilt": (-3.0, 3.0),
}


def emotion_recipes() -> Mapping[Emotion, EmotionRecipe]:
    """The recipe per emotion (read-only), for docs and the UI."""
    return _RECIPES


def voice_class(gender: Gender, age: Age | None) -> VoiceClass:
    """The typical median F0 and formant scale of a gender at an age (None: adult)."""
    if age is Age.CHILD:
        return _CHILD[gender]
    adult = MALE_ADULT if gender is Gender.MALE else FEMALE_ADULT
    if age is None:
        return adult
    male_f0, female_f0, formant = _AGE_CLASS[age]
    return VoiceClass(adult.f0_hz * (male_f0 if gender is Gender.MALE else female_f0), adult.formant * formant)


def classify_voice(f0_hz: float) -> tuple[Gender, Age | None]:
    """The class a voice of this median F0 is taken for (male adult below 160 Hz, a child above 255 Hz)."""
    gender = Gender.FEMALE if f0_hz >= FEMALE_FROM_HZ else Gender.MALE
    return gender, (Age.CHILD if f0_hz >= CHILD_FROM_HZ else None)


@dataclass(frozen=True)
class VoiceTarget:
    """Where an age/gender request moves a voice: F0 target, semitones from the voice, formant factor."""

    f0_hz: float | None = None
    semitones: float = 0.0
    formant: float = 1.0


def voice_target(style: Style, voice_f0_hz: float | None) -> VoiceTarget:
    """The age/gender target for a voice of median ``voice_f0_hz`` (None: taken as a male adult at 120 Hz)."""
    if style.age is None and style.gender is None:
        return VoiceTarget()
    own_f0 = voice_f0_hz if voice_f0_hz and voice_f0_hz > 0 else MALE_ADULT.f0_hz
    gender, age = classify_voice(own_f0)
    target_gender, target_age = style.gender or gender, style.age or age
    if (target_gender, target_age) == (gender, age):
        return VoiceTarget()
    own, goal = voice_class(gender, age), voice_class(target_gender, target_age)
    same_class = target_gender is gender and Age.CHILD not in (age, target_age)
    keeps = 1.0 if same_class else TARGET_KEEPS  # an adult age keeps the voice's own pitch, moved by the age
    f0 = goal.f0_hz * (own_f0 / own.f0_hz) ** keeps
    return VoiceTarget(f0, 12.0 * math.log2(f0 / own_f0), goal.formant / own.formant)


def style_adjust(style: Style, voice_f0_hz: float | None = None) -> StyleAdjust:
    """The signal-level settings for ``style`` on a voice of median F0 ``voice_f0_hz`` (None = unknown).

    Explicit speed, pitch, range and volume replace the emotion recipe's; the recipe fills the rest.
    """
    recipe = _RECIPES[style.emotion] if style.emotion is not None else NEUTRAL_RECIPE
    notes: list[str] = []
    if style.emotion is not None and recipe != NEUTRAL_RECIPE:
        notes.append(_recipe_note(style.emotion, recipe))
    target = voice_target(style, voice_f0_hz)
    manner = _AGE_MANNER[style.age] if style.age is not None and target.f0_hz is not None else AgeManner()
    if target.f0_hz is not None:
        notes.append(f"voice target {target.f0_hz:.0f} Hz ({target.semitones:+.1f} st), formants x{target.formant:.2f}")
    speed = style.speed if style.speed is not None else recipe.speed * manner.speed
    pitch = style.pitch_semitones if style.pitch_semitones is not None else recipe.pitch_semitones
    pitch_range = style.pitch_range if style.pitch_range is not None else recipe.pitch_range * manner.pitch_range
    volume = style.volume_db if style.volume_db is not None else recipe.gain_db
    tilt = TILT_PER_DB * (style.volume_db or 0.0) + recipe.tilt_db_per_octave + manner.tilt_db_per_octave
    return StyleAdjust(
        length_scale_factor=_limit("length", 1.0 / speed),
        f0_target_hz=None if target.f0_hz is None else round(target.f0_hz, 2),
        voice_pitch_st=round(target.semitones, 3),
        pitch_semitones=_limit("pitch", pitch),
        pitch_range=_limit("range", pitch_range),
        formant_factor=_limit("formant", target.formant),
        gain_db=_limit("gain", volume),
        tilt_db_per_octave=_limit("tilt", tilt),
        whisper=recipe.whisper,
        notes=tuple(notes),
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
