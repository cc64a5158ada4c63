"""Style -> signal-level adjustments: the documented directions, with margin for audio-level checks."""

from __future__ import annotations

import re

import pytest

from voicelab.instruct import render
from voicelab.instruct.parser import parse_instruction
from voicelab.instruct.render import StyleAdjust, emotion_recipes, style_adjust
from voicelab.instruct.style import Age, Emotion, Gender, Style


def adjust(text: str) -> StyleAdjust:
    parsed = parse_instruction(text)
    assert parsed.not_understood == ()
    return style_adjust(parsed.style)


def test_speed_words_change_duration_with_margin() -> None:
    assert adjust("speak slowly").length_scale_factor >= 1.3
    assert adjust("very slowly").length_scale_factor >= 1.6
    assert adjust("慢慢地说").length_scale_factor >= 1.3
    assert adjust("very fast").length_scale_factor <= 0.65
    assert adjust("fast").length_scale_factor <= 0.8


def test_pitch_words_shift_pitch_with_margin() -> None:
    assert adjust("higher pitch").pitch_semitones >= 2.5
    assert adjust("deep, low voice").pitch_semitones <= -2.5
    assert adjust("高音").pitch_semitones >= 2.5
    assert adjust("低沉").pitch_semitones <= -2.5


def test_loud_and_soft_differ_in_gain_and_brightness() -> None:
    loud, soft = adjust("loud"), adjust("soft")
    assert loud.gain_db - soft.gain_db >= 12
    assert loud.tilt_db_per_octave > 0 > soft.tilt_db_per_octave
    assert adjust("大声").gain_db - adjust("小声").gain_db >= 12


def test_whisper_is_unvoiced_and_softer() -> None:
    for text in ("whisper", "耳语", "说悄悄话"):
        result = adjust(text)
        assert result.whisper and result.gain_db < 0, text
    assert not adjust("don't whisper").whisper


def test_neutral_style_changes_nothing() -> None:
    assert style_adjust(Style()).is_identity
    assert style_adjust(Style(emotion=Emotion.NEUTRAL)).is_identity
    assert not style_adjust(Style(speed=0.9)).is_identity


# emotion -> expected sign of (speed - 1, pitch, range - 1, gain, tilt); 0 = no requirement
DIRECTIONS = {
    Emotion.HAPPY: (+1, +1, +1, +1, 0),
    Emotion.SAD: (-1, -1, -1, -1, 0),
    Emotion.ANGRY: (+1, 0, +1, +1, +1),
    Emotion.SURPRISED: (0, +1, +1, 0, 0),
    Emotion.FEARFUL: (+1, +1, -1, -1, 0),
    Emotion.DISGUSTED: (-1, -1, 0, 0, 0),
    Emotion.CALM: (-1, 0, -1, -1, 0),
    Emotion.WHISPER: (0, 0, 0, -1, 0),
}


def _sign(x: float) -> int:
    return (x > 1e-9) - (x < -1e-9)


@pytest.mark.parametrize("emotion", list(DIRECTIONS))
def test_emotion_recipes_push_the_documented_way(emotion: Emotion) -> None:
    result = style_adjust(Style(emotion=emotion))
    measured = (
        1.0 / result.length_scale_factor - 1.0,
        result.pitch_semitones,
        result.pitch_range - 1.0,
        result.gain_db,
        result.tilt_db_per_octave,
    )
    for want, got in zip(DIRECTIONS[emotion], measured, strict=True):
        if want:
            assert _sign(got) == want, (emotion, measured)


def test_surprise_raises_pitch_most() -> None:
    recipes = emotion_recipes()
    assert max(recipes, key=lambda e: recipes[e].pitch_semitones) is Emotion.SURPRISED
    assert recipes[Emotion.SURPRISED].pitch_semitones >= 2 * recipes[Emotion.HAPPY].pitch_semitones


def test_docstring_table_matches_the_recipes() -> None:
    doc = render.__doc__ or ""
    rows = re.findall(
        r"^\| (\w+)\s+\| ([\d.]+)\s+\| ([+-]?[\d.]+)\s+\| ([\d.]+)\s+\| ([+-]?\d+)\s+\| ([+-]?[\d.]+)", doc, re.M
    )
    table = {Emotion(r[0]): tuple(float(x) for x in r[1:]) for r in rows if r[0] in Emotion._value2member_map_}
    assert set(table) == set(Emotion)
    for emotion, recipe in emotion_recipes().items():
        expected = (recipe.speed, recipe.pitch_semitones, recipe.pitch_range, recipe.gain_db, recipe.tilt_db_per_octave)
        assert table[emotion] == pytest.approx(expected), emotion


def test_explicit_values_replace_the_emotion_recipe() -> None:
    result = style_adjust(Style(speed=0.75, pitch_semitones=3.0, volume_db=-6.0, emotion=Emotion.HAPPY))
    assert result.length_scale_factor == pytest.approx(1 / 0.75, abs=1e-3)
    assert result.pitch_semitones == pytest.approx(3.0) and result.gain_db == pytest.approx(-6.0)
    assert style_adjust(Style(emotion=Emotion.SAD)).length_scale_factor > 1.1  # recipe speed when none asked
    tired_annoyed = adjust("sound tired and a bit annoyed")
    assert tired_annoyed.gain_db == pytest.approx(-3.0), "the explicit -3 dB, not -3 + the anger recipe's +5"
    assert adjust("用低沉沙哑的声音，很生气地说").pitch_semitones == pytest.approx(-3.0)


def test_age_and_gender_are_targets_relative_to_the_voice() -> None:
    male_voice, female_voice = 91.0, 200.0
    female = style_adjust(Style(gender=Gender.FEMALE), male_voice)
    assert female.f0_target_hz is not None and 165.0 <= female.f0_target_hz <= 255.0
    assert female.formant_factor >= 1.12 and female.requested_pitch_st > 9.0
    girl = style_adjust(Style(gender=Gender.FEMALE, age=Age.CHILD), male_voice)
    assert girl.f0_target_hz is not None and girl.f0_target_hz > female.f0_target_hz
    assert girl.formant_factor > female.formant_factor
    assert style_adjust(Style(gender=Gender.FEMALE), female_voice).is_identity  # already a female voice
    male = style_adjust(Style(gender=Gender.MALE), female_voice)
    assert male.f0_target_hz is not None and male.f0_target_hz < 140.0 and male.formant_factor < 0.9
    elderly = style_adjust(Style(age=Age.ELDERLY), male_voice)
    assert elderly.requested_pitch_st < 0 and elderly.pitch_range < 1 and elderly.length_scale_factor > 1
    boy, girl_words = (
        style_adjust(parse_instruction("a little boy").style, male_voice),
        style_adjust(parse_instruction("a little girl").style, male_voice),
    )
    assert girl_words.requested_pitch_st > boy.requested_pitch_st > 12.0 and boy.formant_factor > 1.2


def test_everything_stays_within_limits() -> None:
    extreme = Style(speed=2.0, pitch_semitones=12.0, pitch_range=2.5, volume_db=12.0, emotion=Emotion.SURPRISED)
    result = style_adjust(Style(age=Age.CHILD, gender=Gender.FEMALE).overridden_by(extreme))
    assert result.pitch_semitones <= 12 and result.pitch_range <= 2.5 and result.gain_db <= 12
    assert 0.75 <= result.formant_factor <= 1.35 and abs(result.tilt_db_per_octave) <= 3
    assert result.length_scale_factor == 0.5


def test_notes_explain_each_contribution() -> None:
    notes = style_adjust(Style(emotion=Emotion.SAD, age=Age.CHILD), 91.0).notes
    assert any(n.startswith("emotion sad") for n in notes) and any(n.startswith("voice target") for n in notes)
