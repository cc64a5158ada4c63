"""Voice-Sculptor-style dropdowns (age, gender, pitch, pitch variation, volume, speed, emotion) → ``Style``.

Every dropdown starts at "unspecified". A dropdown that is set overrides what the instruction says
about the same attribute; the rest of the instruction still applies (``resolve_style``). The numbers are
the instruction parser's own scale (``scales``), so "slow" here equals "slowly" typed in the box.

- pitch (semitones): very high +5, high +3, medium-high +1.5, medium 0, medium-low -1.5, low -3, very low -5
- pitch variation (range factor): very strong 2.0, strong 1.5, moderate 1.0, weak 0.7, very weak 0.5
- volume (dB): very loud +9, loud +6, slightly loud +3, medium 0, slightly soft -3, soft -6, very soft -9
- speed (x): very fast 1.6, fast 1.3, slightly fast 1.1, medium 1.0, slightly slow 0.9, slow 0.75, very slow 0.6
- age: child, young adult, middle-aged, elderly; gender: male, female
- emotion: happy, angry, sad, surprised, disgusted, fearful, plus calm, whisper and neutral
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from types import MappingProxyType
from typing import Any

from voicelab.errors import InvalidSettingError
from voicelab.instruct.parser import ParsedInstruction, parse_instruction
from voicelab.instruct.scales import NEUTRAL, PLAIN, SLIGHT, STRONG, Attr, level
from voicelab.instruct.style import Age, Emotion, Gender, Style

UNSPECIFIED = "unspecified"


def _ladder(attr: Attr, up: tuple[str, str, str], middle: str, down: tuple[str, str, str]) -> dict[str, float]:
    """Labels from strongest up to strongest down, on the parser's grades 3, 2, 1, neutral, 1, 2, 3."""
    grades = (STRONG, PLAIN, SLIGHT)
    return {
        **{label: level(attr, +1, g) for label, g in zip(up, grades, strict=True)},
        middle: NEUTRAL[attr],
        **{label: level(attr, -1, g) for label, g in zip(down, reversed(grades), strict=True)},
    }


ControlValue = float | Emotion | Age | Gender

_VALUES: Mapping[str, Mapping[str, ControlValue]] = MappingProxyType(
    {
        "age": {a.value: a for a in Age},
        "gender": {g.value: g for g in Gender},
        "pitch": _ladder(Attr.PITCH, ("very high", "high", "medium-high"), "medium", ("medium-low", "low", "very low")),
        "pitch_variation": {
            "very strong": level(Attr.RANGE, +1, STRONG),
            "strong": level(Attr.RANGE, +1, PLAIN),
            "moderate": NEUTRAL[Attr.RANGE],
            "weak": level(Attr.RANGE, -1, PLAIN),
            "very weak": level(Attr.RANGE, -1, STRONG),
        },
        "volume": _ladder(
            Attr.VOLUME, ("very loud", "loud", "slightly loud"), "medium", ("slightly soft", "soft", "very soft")
        ),
        "speed": _ladder(
            Attr.SPEED, ("very fast", "fast", "slightly fast"), "medium", ("slightly slow", "slow", "very slow")
        ),
        "emotion": {
            e.value: e
            for e in (
                Emotion.HAPPY,
                Emotion.ANGRY,
                Emotion.SAD,
                Emotion.SURPRISED,
                Emotion.DISGUSTED,
                Emotion.FEARFUL,
                Emotion.CALM,
                Emotion.WHISPER,
                Emotion.NEUTRAL,
            )
        },
    }
)

# Choice lists for the UI, "unspecified" first.
AGE_CHOICES: tuple[str, ...] = (UNSPECIFIED, *_VALUES["age"])
GENDER_CHOICES: tuple[str, ...] = (UNSPECIFIED, *_VALUES["gender"])
PITCH_CHOICES: tuple[str, ...] = (UNSPECIFIED, *_VALUES["pitch"])
PITCH_VARIATION_CHOICES: tuple[str, ...] = (UNSPECIFIED, *_VALUES["pitch_variation"])
VOLUME_CHOICES: tuple[str, ...] = (UNSPECIFIED, *_VALUES["volume"])
SPEED_CHOICES: tuple[str, ...] = (UNSPECIFIED, *_VALUES["speed"])
EMOTION_CHOICES: tuple[str, ...] = (UNSPECIFIED, *_VALUES["emotion"])

_STYLE_FIELD = {
    "age": "age",
    "gender": "gender",
    "pitch": "pitch_semitones",
    "pitch_variation": "pitch_range",
    "volume": "volume_db",
    "speed": "speed",
    "emotion": "emotion",
}


def control_values(name: str) -> Mapping[str, ControlValue]:
    """label → value for one dropdown (read-only), e.g. ``control_values("speed")["slow"] == 0.75``."""
    return MappingProxyType(dict(_VALUES[name]))


def controls_to_style(
    age: str | None = UNSPECIFIED,
    gender: str | None = UNSPECIFIED,
    pitch: str | None = UNSPECIFIED,
    pitch_variation: str | None = UNSPECIFIED,
    volume: str | None = UNSPECIFIED,
    speed: str | None = UNSPECIFIED,
    emotion: str | None = UNSPECIFIED,
) -> Style:
    """The style the dropdowns ask for; "unspecified" (or None) leaves an attribute to the instruction."""
    chosen = {
        "age": age,
        "gender": gender,
        "pitch": pitch,
        "pitch_variation": pitch_variation,
        "volume": volume,
        "speed": speed,
        "emotion": emotion,
    }
    values: dict[str, Any] = {}
    for name, label in chosen.items():
        if label is None or label == UNSPECIFIED:
            continue
        options = _VALUES[name]
        if label not in options:
            raise InvalidSettingError(
                f"Unknown {name.replace('_', ' ')} choice {label!r}; choose one of: {', '.join(options)}."
            )
        values[_STYLE_FIELD[name]] = options[label]
    return Style(**values)


def style_to_controls(style: Style) -> dict[str, str]:
    """The dropdown labels that show ``style`` exactly, or "unspecified" where no label matches."""
    out: dict[str, str] = {}
    for name, field_name in _STYLE_FIELD.items():
        value = getattr(style, field_name)
        labels = [label for label, v in _VALUES[name].items() if _same(v, value)]
        out[name] = labels[0] if labels else UNSPECIFIED
    return out


def resolve_style(instruction: str, controls: Style) -> ParsedInstruction:
    """Parse ``instruction``, then let every attribute the controls specify override it.

    An age or gender dropdown sets the voice's pitch target, so it also overrides what the instruction
    said about pitch ("deep voice" + gender female: the female target, not the target minus 3 st), unless
    the pitch dropdown is set too. Words whose every value was overridden move to "not rendered".
    """
    parsed = parse_instruction(instruction)
    overridden = {f.name for f in fields(controls) if getattr(controls, f.name) is not None}
    style = parsed.style.overridden_by(controls)
    if (controls.age is not None or controls.gender is not None) and controls.pitch_semitones is None:
        overridden.add("pitch_semitones")
        style = replace(style, pitch_semitones=None)
    return replace(parsed.without_fields(frozenset(overridden)), style=style)


def _same(choice: ControlValue, value: ControlValue | None) -> bool:
    if isinstance(choice, float) and isinstance(value, float):
        return abs(choice - value) < 1e-9
    return choice == value
