"""The built-in voices as a user from CosyVoice hears them: Chinese by the Mandarin voice, English by the
English voice, mixed text run by run in order, and a clear sentence for writing no voice reads.

One in-process engine with the default backend ("builtin": Piper's en_US-joe-medium, a low male voice of
~90 Hz, and the Baker Mandarin voice, a female voice of ~200+ Hz) serves the module, so which voice spoke a
stretch of audio is heard in its pitch. What was said is heard by Whisper (tests/judges.py): each bound is the
measured error plus one more misheard word or syllable (at least +0.10), rounded up to 0.05.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.audio_measures import measure, semitones
from tests.judges import assert_heard
from voicelab.backends.base import AudioChunk
from voicelab.engine.core import EngineCore
from voicelab.engine.messages import SynthesisRequest
from voicelab.errors import InvalidSettingError, InvalidTextError
from voicelab.instruct.presets import PRESETS
from voicelab.instruct.style import Style
from voicelab.voice.intake import load_prompt

CHINESE_20 = "今天天气很好，我们一起去公园散步吧，好不好呀？"
MIXED = "我今天用 VoiceLab 做了一个 demo，效果很好。"
PROMPT = Path(__file__).parent / "data" / "arctic_slt_en_female.wav"


def hanzi(text: str) -> int:
    return sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff")


def test_a_chinese_sentence_is_spoken_by_the_mandarin_voice(core: EngineCore) -> None:
    result = core.synthesize(SynthesisRequest(CHINESE_20, seed=1))
    heard = measure(result.audio, result.sample_rate)
    assert hanzi(CHINESE_20) == 20 and result.language == "zh"
    assert 3.0 <= heard.duration_s <= 8.0, f"{heard.duration_s:.2f} s for 20 characters"
    assert 0.15 <= heard.duration_s / 20 <= 0.40
    assert heard.voiced_ratio >= 0.4
    assert heard.f0_median_hz > 150, "a low male voice spoke: the English voice, spelling 'Chinese letter'?"
    assert_heard(CHINESE_20, result.audio, result.sample_rate, "zh", 0.1)  # measured 0.000 (20 syllables)


def test_english_is_still_the_english_voice_at_its_own_rate(core: EngineCore) -> None:
    text = "The quick brown fox jumps over the lazy dog."
    result = core.synthesize(SynthesisRequest(text, seed=1))
    heard = measure(result.audio, result.sample_rate)
    assert result.language == "en" and result.sample_rate == 22050
    assert 0.06 <= heard.duration_s / len(text) <= 0.1
    assert heard.f0_median_hz < 140
    assert_heard(text, result.audio, result.sample_rate, "en", 0.15)  # measured 0.000 (9 words)


def test_mixed_text_keeps_each_run_in_its_own_voice_in_order(core: EngineCore) -> None:
    chunks: list[AudioChunk] = []
    result = core.run(SynthesisRequest(MIXED, seed=2), lambda chunk, _: chunks.append(chunk))
    assert [c.language for c in chunks] == ["zh", "en", "zh", "en", "zh"]
    assert [c.text.strip() for c in chunks][1] == "VoiceLab"
    pitches = {
        lang: [measure(c.audio, c.sample_rate).f0_median_hz for c in chunks if c.language == lang]
        for lang in ("zh", "en")
    }
    assert min(pitches["zh"]) > 150 and max(pitches["en"]) < 140, pitches
    assert result.language == "zh+en"
    np.testing.assert_array_equal(np.concatenate([c.audio for c in chunks]), result.audio)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("こんにちは、世界", "Japanese kana"),
        ("مرحبا بالعالم", "Arabic"),
        ("Привет, мир", "Cyrillic"),
        ("안녕하세요", "Korean Hangul"),
    ],
)
def test_writing_no_voice_reads_gets_one_sentence(core: EngineCore, text: str, named: str) -> None:
    with pytest.raises(InvalidTextError) as caught:
        core.synthesize(SynthesisRequest(text))
    message = str(caught.value)
    assert named in message and "English and Chinese" in message and "letter" not in message.split(";")[1]


def test_an_explicit_language_must_fit_the_text(core: EngineCore) -> None:
    with pytest.raises(InvalidTextError, match="Chinese characters"):
        core.synthesize(SynthesisRequest("你好 world", language="en"))
    with pytest.raises(InvalidSettingError, match="speaks English and Chinese"):
        core.synthesize(SynthesisRequest("hello", language="fr"))
    forced = core.synthesize(SynthesisRequest("2026年12月1日", language="zh", seed=1))
    assert forced.language == "zh"
    # read as Chinese numerals: measured 0.100 (10 syllables), Whisper writes 2016年 (its prior for years)
    assert_heard("2026年12月1日", forced.audio, forced.sample_rate, "zh", 0.2)


# The Chinese presets' sample texts in the neutral voice (tests/test_listening.py hears them styled):
# preset name → (measured pinyin error, bound).
CHINESE_SAMPLES_HEARD = {
    "睡前故事奶奶 (bedtime grandma)": (0.000, 0.10),  # 25 syllables
    "新闻主播 (Chinese news anchor)": (0.000, 0.10),  # 18
    "体育解说 (sports commentator)": (0.150, 0.25),  # 20: 球进了 heard as 球技能, 太精彩了 as 泰京彩雷
    "甜美少女 (sweet girl)": (0.059, 0.20),  # 17: 风筝 heard as 風中
    "鬼故事 (ghost story)": (0.080, 0.20),  # 25: 尽头 as 静头, 听见 as 天见
    "小男孩 (little boy)": (0.000, 0.10),  # 19
}


@pytest.mark.parametrize("preset", [p for p in PRESETS if p.language == "zh"], ids=lambda p: p.name)
def test_chinese_presets_speak_chinese(core: EngineCore, preset: object) -> None:
    text = preset.sample_text  # type: ignore[attr-defined]
    result = core.synthesize(SynthesisRequest(text, seed=3))
    seconds_per_char = result.duration_s / hanzi(text)
    assert result.language == "zh" and 0.15 <= seconds_per_char <= 0.40, f"{seconds_per_char:.2f} s per character"
    _measured, bound = CHINESE_SAMPLES_HEARD[preset.name]  # type: ignore[attr-defined]
    assert_heard(text, result.audio, result.sample_rate, "zh", bound)


def test_styles_move_the_mandarin_voice(core: EngineCore) -> None:
    text = "我们一起去公园散步吧。"
    neutral = measure(*_audio(core, text, Style()))
    slow = measure(*_audio(core, text, Style(speed=0.5)))
    higher = measure(*_audio(core, text, Style(pitch_semitones=4.0)))
    louder = measure(*_audio(core, text, Style(volume_db=6.0)))
    assert slow.duration_s / neutral.duration_s == pytest.approx(2.0, rel=0.15)
    assert semitones(higher.f0_median_hz, neutral.f0_median_hz) == pytest.approx(4.0, abs=1.5)
    assert higher.duration_s == pytest.approx(neutral.duration_s, rel=0.05)  # native F0: no re-timing
    assert louder.speech_rms_dbfs - neutral.speech_rms_dbfs == pytest.approx(6.0, abs=1.5)


def test_a_prompt_voice_moves_the_mandarin_voice_toward_it(core: EngineCore) -> None:
    prompt = load_prompt(PROMPT)  # a female US English speaker, for Chinese text: signal-level matching only
    result = core.synthesize(SynthesisRequest("我们一起去公园散步吧，好不好？", seed=4, prompt=prompt))
    assert result.similarity is not None and result.similarity_base is not None  # the judge's figures are there
    assert result.similarity_ge2e is not None and result.similarity_ge2e_base is not None
    assert result.similarity_ge2e >= result.similarity_ge2e_base - 0.01  # the search's own objective moved
    assert result.f0_output_hz == pytest.approx(result.f0_prompt_hz, rel=0.10)


def _audio(core: EngineCore, text: str, style: Style) -> tuple[np.ndarray, int]:
    result = core.synthesize(SynthesisRequest(text, seed=5, style=style))
    return result.audio, result.sample_rate
