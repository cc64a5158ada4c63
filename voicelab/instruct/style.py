"""The typed speaking style that instructions, controls and presets produce."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from enum import Enum, StrEnum
from typing import Any


class Emotion(StrEnum):
    NEUTRAL = "neutral"
    HAPPY = "happy"
    SAD = "sad"
    ANGRY = "angry"
    SURPRISED = "surprised"
    FEARFUL = "fearful"
    DISGUSTED = "disgusted"
    CALM = "calm"
    WHISPER = "whisper"


class Age(StrEnum):
    CHILD = "child"
    YOUNG_ADULT = "young adult"
    MIDDLE_AGED = "middle-aged"
    ELDERLY = "elderly"


class Gender(StrEnum):
    MALE = "male"
    FEMALE = "female"


SPEED_RANGE = (0.5, 2.0)


@dataclass(frozen=True)
class Style:
    """How the speech should sound; ``None`` means "unspecified, use the voice's own".

    speed: speaking-rate multiplier (2.0 = twice as fast), within ``SPEED_RANGE``.
    pitch_semitones: pitch level shift relative to the voice.
    pitch_range: factor on pitch variation (1.0 = unchanged, <1 flatter, >1 livelier).
    volume_db: loudness change in dB.
    """

    speed: float | None = None
    pitch_semitones: float | None = None
    pitch_range: float | None = None
    volume_db: float | None = None
    emotion: Emotion | None = None
    age: Age | None = None
    gender: Gender | None = None

    def __post_init__(self) -> None:
        if self.speed is not None and not SPEED_RANGE[0] <= self.speed <= SPEED_RANGE[1]:
            raise ValueError(f"speed must be within {SPEED_RANGE}, got {self.speed}")
        if self.pitch_range is not None and self.pitch_range <= 0:
            raise ValueError(f"pitch_range must be positive, got {self.pitch_range}")

    def overridden_by(self, other: Style) -> Style:
        """This style with every attribute that ``other`` specifies taken from ``other``."""
        changes = {f.name: getattr(other, f.name) for f in fields(other) if getattr(other, f.name) is not None}
        return replace(self, **changes)

    @property
    def is_neutral(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))

    def to_dict(self) -> dict[str, Any]:
        """Only the specified attributes, enums as their values (for JSON)."""
        out: dict[str, Any] = {}
        for key, value in asdict(self).items():
            if value is not None:
                out[key] = value.value if isinstance(value, Enum) else value
        return out
