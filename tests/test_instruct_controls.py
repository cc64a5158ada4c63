"""Dropdown controls: choice lists, mapping onto the parser's scale, and overriding the instruction."""

from __future__ import annotations

import pytest

from voicelab.errors import InvalidSettingError
from voicelab.instruct.controls import (
    AGE_CHOICES,
    EMOTION_CHOICES,
    GENDER_CHOICES,
    PITCH_CHOICES,
    PITCH_VARIATION_CHOICES,
    SPEED_CHOICES,
    UNSPECIFIED,
    VOLUME_CHOICES,
    control_values,
    controls_to_style,
    resolve_style,
    style_to_controls,
)
from voicelab.instruct.parser import parse_instruction
from voicelab.instruct.style import Age, Emotion, Gender, Style

ALL_CHOICES = (
    AGE_CHOICES,
    GENDER_CHOICES,
    PITCH_CHOICES,
    PITCH_VARIATION_CHOICES,
    VOLUME_CHOICES,
    SPEED_CHOICES,
    EMOTION_CHOICES,
)


def test_every_dropdown_starts_unspecified_and_that_means_nothing() -> None:
    assert all(choices[0] == UNSPECIFIED for choices in ALL_CHOICES)
    assert controls_to_style().is_neutral
    assert controls_to_style(speed=None, emotion=None).is_neutral


def test_required_choices_exist() -> None:
    assert {"happy", "angry", "sad", "surprised", "disgusted", "fearful"} <= set(EMOTION_CHOICES)
    assert {"very high", "high", "medium", "low", "very low"} <= set(PITCH_CHOICES)
    assert {"very strong", "strong", "moderate", "weak", "very weak"} <= set(PITCH_VARIATION_CHOICES)
    assert {"very loud", "loud", "medium", "soft", "very soft"} <= set(VOLUME_CHOICES)
    assert {"very fast", "fast", "medium", "slow", "very slow"} <= set(SPEED_CHOICES)


@pytest.mark.parametrize("name", ["pitch", "pitch_variation", "volume", "speed"])
def test_ladders_are_ordered_strongest_up_to_strongest_down(name: str) -> None:
    values = list(control_values(name).values())
    assert values == sorted(values, reverse=True)
    assert len(set(values)) == len(values)


def test_dropdowns_use_the_same_numbers_as_words() -> None:
    assert controls_to_style(speed="slow").speed == parse_instruction("slowly").style.speed
    assert controls_to_style(speed="very fast").speed == parse_instruction("very fast").style.speed
    assert controls_to_style(volume="loud").volume_db == parse_instruction("loud").style.volume_db
    assert controls_to_style(pitch="high").pitch_semitones == parse_instruction("higher pitch").style.pitch_semitones


def test_controls_to_style_sets_each_attribute() -> None:
    style = controls_to_style(
        age="elderly",
        gender="female",
        pitch="low",
        pitch_variation="weak",
        volume="soft",
        speed="very slow",
        emotion="sad",
    )
    assert style == Style(
        speed=0.6,
        pitch_semitones=-3.0,
        pitch_range=0.7,
        volume_db=-6.0,
        emotion=Emotion.SAD,
        age=Age.ELDERLY,
        gender=Gender.FEMALE,
    )
    assert style_to_controls(style)["speed"] == "very slow"
    assert controls_to_style(**style_to_controls(style)) == style


def test_a_set_control_overrides_the_instruction_only_for_its_attribute() -> None:
    resolved = resolve_style("very fast and loud, happy", controls_to_style(speed="slow", emotion="sad"))
    assert resolved.style.speed == 0.75
    assert resolved.style.emotion is Emotion.SAD
    assert resolved.style.volume_db == 6.0  # untouched by the controls


def test_unspecified_controls_leave_the_instruction_alone() -> None:
    resolved = resolve_style("用温柔低沉的声音慢慢地说", controls_to_style())
    assert resolved == parse_instruction("用温柔低沉的声音慢慢地说")


def test_unknown_choice_is_a_clear_error() -> None:
    with pytest.raises(InvalidSettingError, match="speed choice 'warp'"):
        controls_to_style(speed="warp")
