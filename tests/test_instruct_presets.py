"""Presets: enough of them, the asked-for themes, and every instruction fully understood."""

from __future__ import annotations

import pytest

from voicelab.errors import InvalidSettingError
from voicelab.instruct.parser import parse_instruction
from voicelab.instruct.presets import PRESET_NAMES, PRESETS, Preset, get_preset
from voicelab.instruct.render import style_adjust
from voicelab.instruct.style import Emotion


@pytest.mark.parametrize("preset", PRESETS, ids=[p.name for p in PRESETS])
def test_every_preset_parses_cleanly(preset: Preset) -> None:
    parsed = parse_instruction(preset.instruction)
    assert parsed.not_understood == ()
    assert not parsed.style.is_neutral
    assert preset.language in ("en", "zh")
    assert preset.sample_text.strip()


def test_there_are_enough_presets_in_both_languages() -> None:
    assert len(PRESETS) >= 12
    assert len(set(PRESET_NAMES)) == len(PRESETS)
    assert sum(p.language == "zh" for p in PRESETS) >= 3


def test_named_themes_sound_the_way_their_names_say() -> None:
    asmr = style_adjust(parse_instruction(get_preset("ASMR").instruction).style)
    assert asmr.whisper and asmr.gain_db < 0
    streamer = parse_instruction(get_preset("Game streamer").instruction).style
    assert streamer.volume_db is not None and streamer.volume_db >= 6 and streamer.emotion is Emotion.HAPPY
    meditation = style_adjust(parse_instruction(get_preset("Meditation guide").instruction).style)
    assert meditation.length_scale_factor >= 1.2 and meditation.gain_db < 0
    anchor = parse_instruction(get_preset("News anchor").instruction).style
    assert anchor.emotion is Emotion.CALM and anchor.speed == 1.0
    storyteller = parse_instruction(get_preset("Storyteller").instruction).style
    assert storyteller.pitch_range is not None and storyteller.pitch_range >= 1.5
    elderly = parse_instruction(get_preset("Elderly narrator").instruction).style
    assert elderly.pitch_semitones is not None and elderly.pitch_semitones < 0 and elderly.age is not None


def test_unknown_preset_name_is_a_clear_error() -> None:
    with pytest.raises(InvalidSettingError, match="no preset"):
        get_preset("Opera singer")
