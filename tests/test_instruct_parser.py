"""The instruction parser against the documented scale, in English and Chinese."""

from __future__ import annotations

import random

import pytest

from voicelab.errors import InvalidSettingError
from voicelab.instruct.controls import controls_to_style, resolve_style
from voicelab.instruct.lexicon_en import EN_LEXICON
from voicelab.instruct.lexicon_zh import ZH_LEXICON
from voicelab.instruct.parser import MAX_INSTRUCTION_CHARS, parse_instruction
from voicelab.instruct.style import Style

# (instruction, the style's specified attributes exactly)
ENGLISH = [
    ("speak slowly", {"speed": 0.75}),
    ("very slowly", {"speed": 0.6}),
    ("extremely slowly", {"speed": 0.5}),
    ("a bit slower", {"speed": 0.9}),
    ("slow down a little", {"speed": 0.9}),
    ("not too fast", {"speed": 0.9}),
    ("fast", {"speed": 1.3}),
    ("very fast", {"speed": 1.6}),
    ("very very fast", {"speed": 2.0}),
    ("faster", {"speed": 1.3}),
    ("without rushing", {"speed": 0.9}),
    ("at a normal pace", {"speed": 1.0}),
    ("higher pitch", {"pitch_semitones": 3.0}),
    ("a slightly higher pitch", {"pitch_semitones": 1.5}),
    ("deep, low voice", {"pitch_semitones": -3.0}),
    ("deeper", {"pitch_semitones": -3.0}),
    ("loud", {"volume_db": 6.0}),
    ("a bit louder", {"volume_db": 3.0}),
    ("louder, but only slightly", {"volume_db": 3.0}),
    ("soft", {"volume_db": -6.0}),
    ("quiet", {"volume_db": -6.0}),
    ("don't shout", {"volume_db": -3.0}),
    ("much less loud", {"volume_db": -6.0}),
    ("lower your voice", {"volume_db": -6.0}),
    ("turn up the volume", {"volume_db": 6.0}),
    ("higher pitch and lower volume", {"pitch_semitones": 3.0, "volume_db": -6.0}),
    ("speak in a monotone", {"pitch_range": 0.5}),
    ("with more pitch variation", {"pitch_range": 1.5}),
    ("less expressive", {"pitch_range": 0.85}),
    ("whisper", {"emotion": "whisper"}),
    ("whispering softly", {"emotion": "whisper", "volume_db": -6.0}),
    ("happy", {"emotion": "happy"}),
    ("very sad", {"emotion": "sad", "speed": 0.9, "volume_db": -3.0}),
    ("not angry", {}),
    ("in a child's voice", {"age": "child"}),
    ("a little girl", {"age": "child", "gender": "female"}),
    ("an old man", {"age": "elderly", "gender": "male"}),
    ("a young woman, cheerfully", {"age": "young adult", "gender": "female", "emotion": "happy"}),
    ("slowly, in a warm low voice", {"speed": 0.75, "pitch_semitones": -3.0}),
    ("1.2x speed", {"speed": 1.2}),
    ("2x slower", {"speed": 0.5}),
    ("lower the pitch by 2 semitones", {"pitch_semitones": -2.0}),
    ("+3 dB", {"volume_db": 3.0}),
    ("5x faster", {"speed": 2.0}),
    ("not too slow, not too fast", {"speed": 1.0}),
    ("female, 30 years old", {"gender": "female", "age": "young adult"}),
    ("a 70-year-old man", {"age": "elderly", "gender": "male"}),
    ("make it sound mysterious", {"speed": 0.9, "pitch_semitones": -1.5, "volume_db": -3.0}),
]

CHINESE = [
    ("慢慢地", {"speed": 0.75}),
    ("慢一点", {"speed": 0.9}),
    ("稍微慢一点", {"speed": 0.9}),
    ("有点慢", {"speed": 0.9}),
    ("语速慢", {"speed": 0.75}),
    ("很慢", {"speed": 0.6}),
    ("快", {"speed": 1.3}),
    ("语速快", {"speed": 1.3}),
    ("快得多", {"speed": 1.6}),
    ("不要太快", {"speed": 0.9}),
    ("说话别太快", {"speed": 0.9}),
    ("语速正常", {"speed": 1.0}),
    ("高音", {"pitch_semitones": 3.0}),
    ("声音高一点", {"pitch_semitones": 1.5}),
    ("低沉", {"pitch_semitones": -3.0}),
    ("大声", {"volume_db": 6.0}),
    ("大声一点", {"volume_db": 3.0}),
    ("别太大声", {"volume_db": -3.0}),
    ("音量大一点", {"volume_db": 3.0}),
    ("小声", {"volume_db": -6.0}),
    ("轻声", {"volume_db": -6.0}),
    ("耳语", {"emotion": "whisper"}),
    ("悄悄话", {"emotion": "whisper"}),
    ("开心", {"emotion": "happy"}),
    ("非常开心", {"emotion": "happy", "pitch_range": 1.2, "volume_db": 3.0}),
    ("开心极了", {"emotion": "happy", "pitch_range": 1.5, "volume_db": 6.0}),
    ("起伏大一点", {"pitch_range": 1.2}),
    ("语调平稳", {"pitch_range": 0.7}),
    ("小男孩的声音", {"age": "child", "gender": "male"}),
    ("男声\uff0c低沉", {"gender": "male", "pitch_semitones": -3.0}),
    ("1.5倍速", {"speed": 1.5}),
    ("降低两个半音", {"pitch_semitones": -2.0}),
    ("六十多岁的老人", {"age": "elderly"}),
    ("不快不慢", {"speed": 1.0}),
    ("不要那么快", {"speed": 0.9}),
]


@pytest.mark.parametrize(("text", "expected"), ENGLISH + CHINESE, ids=[t for t, _ in ENGLISH + CHINESE])
def test_instruction_maps_to_documented_style(text: str, expected: dict[str, object]) -> None:
    parsed = parse_instruction(text)
    assert parsed.style.to_dict() == expected
    assert parsed.not_understood == ()


def test_combination_in_chinese_sets_every_attribute_it_names() -> None:
    style = parse_instruction("用温柔低沉的声音慢慢地说").style
    assert style.speed == 0.75
    assert style.pitch_semitones == -3.0
    assert style.volume_db is not None and style.volume_db < 0  # "温柔" is gentle: a little softer


def test_plain_statement_beats_descriptor_hint() -> None:
    """'warm' hints a lower pitch, but 'higher pitch' says otherwise and wins, in either order."""
    assert parse_instruction("warm, higher pitch").style.pitch_semitones == 3.0
    assert parse_instruction("higher pitch, warm").style.pitch_semitones == 3.0
    assert parse_instruction("warm").style.pitch_semitones == -1.5


def test_later_opposite_statement_wins() -> None:
    assert parse_instruction("fast, no, slowly").style.speed == 0.75


def test_intensity_orders_speeds() -> None:
    speeds = [
        parse_instruction(t).style.speed or 1.0 for t in ("extremely slowly", "very slowly", "slowly", "a bit slower")
    ]
    assert speeds == sorted(speeds)
    assert len(set(speeds)) == 4 and max(speeds) < 1.0


def test_negation_never_goes_the_asked_way() -> None:
    for text in ("not too fast", "don't speak fast", "不要太快", "别太快"):
        speed = parse_instruction(text).style.speed
        assert speed is not None and speed <= 1.0, text
    for text in ("don't shout", "not too loud", "别太大声", "不要大声"):
        volume = parse_instruction(text).style.volume_db
        assert volume is not None and volume <= 0.0, text


@pytest.mark.parametrize(
    ("text", "unknown"),
    [
        ("in a purple voice", ("purple",)),
        ("slowly, like a pirate captain", ("pirate", "captain")),
        ("用紫色的声音说", ("紫色",)),
        ("very", ("very",)),
        ("not", ("not",)),
        ("turn up", ("up",)),
    ],
)
def test_reports_words_it_did_not_understand(text: str, unknown: tuple[str, ...]) -> None:
    assert parse_instruction(text).not_understood == unknown


def test_stop_words_are_not_reported() -> None:
    parsed = parse_instruction("please speak in a calm voice and read the text")
    assert parsed.not_understood == ()
    assert parsed.style == Style(emotion=parsed.style.emotion)
    assert parsed.style.emotion is not None and parsed.style.emotion.value == "calm"
    assert parse_instruction("请用平静的声音说").not_understood == ()


def test_understood_words_are_listed() -> None:
    assert parse_instruction("very slowly, please").matched == ("very", "slowly")


def test_empty_instruction_is_neutral() -> None:
    for text in ("", "   ", ",,,"):
        parsed = parse_instruction(text)
        assert parsed.style.is_neutral and parsed.not_understood == ()


def test_mixed_language_instruction() -> None:
    style = parse_instruction("slowly, 声音低沉").style
    assert (style.speed, style.pitch_semitones) == (0.75, -3.0)


def test_full_width_and_capitals_are_normalised() -> None:
    assert parse_instruction("\uff33\uff2c\uff2f\uff37\uff2c\uff39").style.speed == 0.75  # full-width "SLOWLY"
    style = parse_instruction("慢一点\uff0c大声").style  # full-width comma ends the clause
    assert (style.speed, style.volume_db) == (0.9, 6.0)
    assert parse_instruction("Very Fast!").style.speed == 1.6


def test_values_stay_in_range_even_when_stacked() -> None:
    style = parse_instruction("extremely extremely fast, 10x, +40 semitones, +99 dB, extremely expressive").style
    assert style.speed == 2.0 and style.pitch_semitones == 12.0 and style.volume_db == 12.0
    assert style.pitch_range == 2.5


def test_overlong_instruction_is_refused_with_a_clear_message() -> None:
    with pytest.raises(InvalidSettingError, match="too long"):
        parse_instruction("slowly " * (MAX_INSTRUCTION_CHARS // 7 + 1))


def test_lexicons_are_lower_case_and_nonempty() -> None:
    assert len(EN_LEXICON) > 300 and len(ZH_LEXICON) > 300
    assert all(key == key.lower().strip() and "  " not in key for key in EN_LEXICON)


def test_random_word_salad_never_crashes_and_stays_in_range() -> None:
    rng = random.Random(1234)
    pieces = [*EN_LEXICON, *ZH_LEXICON, ",", "\uff0c", "!", "-", "3", "+2", "x", "db", "半音", "岁", "紫色", "purple"]
    for i in range(1500):
        words = [rng.choice(pieces) for _ in range(rng.randint(0, 10))]
        style = parse_instruction((" " if i % 2 else "").join(words)).style
        assert style.speed is None or 0.5 <= style.speed <= 2.0
        assert style.pitch_semitones is None or abs(style.pitch_semitones) <= 12
        assert style.pitch_range is None or 0.3 <= style.pitch_range <= 2.5
        assert style.volume_db is None or abs(style.volume_db) <= 12


@pytest.mark.parametrize(
    ("instruction", "rendered", "not_rendered"),
    [
        ("用低沉沙哑的声音，很生气地说", ("低沉", "很", "生气"), ("沙哑",)),
        ("沉稳专业, 语速适中, 吐字清晰", ("沉稳", "语速", "适中"), ("专业", "吐字清晰")),
        ("calm and professional, at a normal pace, clear and steady", ("calm", "steady"), ("professional", "clear")),
        ("a hoarse voice", (), ("hoarse",)),
    ],
)
def test_words_that_change_nothing_are_not_listed_as_understood(
    instruction: str, rendered: tuple[str, ...], not_rendered: tuple[str, ...]
) -> None:
    parsed = parse_instruction(instruction)
    assert set(rendered) <= set(parsed.matched) and not set(not_rendered) & set(parsed.matched)
    assert set(not_rendered) <= set(parsed.not_rendered)
    assert parsed.not_understood == ()


def test_sports_commentator_is_understood_whole() -> None:
    parsed = parse_instruction("体育解说员")
    assert parsed.not_understood == () and parsed.matched == ("体育解说员",)
    assert parsed.style.speed is not None and parsed.style.speed > 1.0


def test_an_overriding_dropdown_moves_its_words_to_not_rendered() -> None:
    parsed = resolve_style("用低沉的声音说, slowly", controls_to_style(gender="female", speed="fast"))
    assert parsed.style.pitch_semitones is None and parsed.style.speed == 1.3
    assert {"低沉", "slowly"} <= set(parsed.not_rendered) and "低沉" not in parsed.matched
