"""The documented scales that words, dropdowns and numbers map onto.

Each scalar ``Style`` attribute has a neutral value and a four-step ladder per direction, so that
"slowly", "very slowly", "a bit slower" and the "slow"/"very slow" dropdowns all land on the same
numbers. Grades: 1 = slight ("a bit", "稍微", "一点"), 2 = plain ("slowly", "慢"), 3 = strong
("very", "非常", "很"), 4 = extreme ("extremely", "极其").

| attribute         | neutral | up: grade 1 / 2 / 3 / 4 | down: grade 1 / 2 / 3 / 4 | limits   |
|-------------------|---------|-------------------------|---------------------------|----------|
| speed (x)         | 1.0     | 1.1 / 1.3 / 1.6 / 2.0   | 0.9 / 0.75 / 0.6 / 0.5    | 0.5, 2.0 |
| pitch (semitones) | 0       | +1.5 / +3 / +5 / +8     | -1.5 / -3 / -5 / -8       | -12, +12 |
| pitch range (x)   | 1.0     | 1.2 / 1.5 / 2.0 / 2.5   | 0.85 / 0.7 / 0.5 / 0.3    | 0.3, 2.5 |
| volume (dB)       | 0       | +3 / +6 / +9 / +12      | -3 / -6 / -9 / -12        | -12, +12 |

A negated word ("not too fast", "别太大声") gives the *slight* step the other way (speed 0.9, -3 dB).
Numbers in the text ("1.2x", "+2 semitones", "-3 dB") are used as given, clipped to the limits.
"""

from __future__ import annotations

from enum import StrEnum

SLIGHT, PLAIN, STRONG, EXTREME = 1, 2, 3, 4
GRADES = (SLIGHT, PLAIN, STRONG, EXTREME)


class Attr(StrEnum):
    """A scalar ``Style`` attribute; the value is the ``Style`` field name."""

    SPEED = "speed"
    PITCH = "pitch_semitones"
    RANGE = "pitch_range"
    VOLUME = "volume_db"


NEUTRAL: dict[Attr, float] = {Attr.SPEED: 1.0, Attr.PITCH: 0.0, Attr.RANGE: 1.0, Attr.VOLUME: 0.0}

# attribute -> direction -> values for grades 1..4
LADDERS: dict[Attr, dict[int, tuple[float, float, float, float]]] = {
    Attr.SPEED: {+1: (1.1, 1.3, 1.6, 2.0), -1: (0.9, 0.75, 0.6, 0.5)},
    Attr.PITCH: {+1: (1.5, 3.0, 5.0, 8.0), -1: (-1.5, -3.0, -5.0, -8.0)},
    Attr.RANGE: {+1: (1.2, 1.5, 2.0, 2.5), -1: (0.85, 0.7, 0.5, 0.3)},
    Attr.VOLUME: {+1: (3.0, 6.0, 9.0, 12.0), -1: (-3.0, -6.0, -9.0, -12.0)},
}

LIMITS: dict[Attr, tuple[float, float]] = {
    Attr.SPEED: (0.5, 2.0),
    Attr.PITCH: (-12.0, 12.0),
    Attr.RANGE: (0.3, 2.5),
    Attr.VOLUME: (-12.0, 12.0),
}


def clamp_grade(grade: int) -> int:
    return max(SLIGHT, min(EXTREME, grade))


def level(attr: Attr, direction: int, grade: int) -> float:
    """The value of ``attr`` one ``grade`` step in ``direction`` (0 = neutral)."""
    if direction == 0:
        return NEUTRAL[attr]
    if direction not in (-1, 1):
        raise ValueError(f"direction must be -1, 0 or +1, got {direction}")
    return LADDERS[attr][direction][clamp_grade(grade) - 1]


def clamp(attr: Attr, value: float) -> float:
    """``value`` clipped to the attribute's limits."""
    low, high = LIMITS[attr]
    return max(low, min(high, value))


def scale_rows() -> list[tuple[str, float, tuple[float, ...], tuple[float, ...], tuple[float, float]]]:
    """(attribute, neutral, up ladder, down ladder, limits) per attribute, for docs and the UI."""
    return [(attr.value, NEUTRAL[attr], LADDERS[attr][1], LADDERS[attr][-1], LIMITS[attr]) for attr in Attr]
