"""VoiceLab's own speech, listened to: Whisper (tests/judges.py) must hear the words each voice and preset said.

Everything goes the user's way: ``GenerationService`` over an in-process engine (``InprocClient``) with the
built-in voices (Piper's en_US-joe-medium for English, the Baker FastSpeech2 voice for Mandarin), one
sentence per case, each case synthesised and transcribed once. English is scored by WER, Chinese by pinyin CER
(voicelab/judges/text.py: Whisper often writes Traditional characters). Every bound was set from a measured
run (CPU, int8 on an Intel CPU, one thread, greedy decoding; the same on a second run; the float32 judge of
2026-12-04 passes every bound on an AMD EPYC too), kept beside it as ``measured``: the
bound is the measured error plus one more misheard token of that sentence (at least +0.10), rounded up to 0.05,
so a voice or style that stops saying its words fails while one word heard differently on another CPU does not.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import torch

from tests.judges import Heard, listen
from voicelab.engine.inproc import InprocClient
from voicelab.errors import InvalidTextError
from voicelab.instruct.presets import PRESETS, Preset
from voicelab.judges.text import pinyin_error_rate
from voicelab.settings import Settings
from voicelab.studio import GenerationRequest, GenerationService

SEED = 1
# Each built-in voice, by the language it reads: (its name, one sentence, measured, bound).
VOICES: dict[str, tuple[str, str, float, float]] = {
    "en": ("en_US-joe-medium", "Please mind the gap between the train and the platform.", 0.000, 0.10),
    "zh": ("Baker Mandarin", "今天天气很好，我们去公园散步吧。", 0.071, 0.20),  # 吧 heard as 班
}
# A preset's style on the other language: its own sample text is in one language only.
OTHER_TEXT = {"en": "The garden looks lovely in the morning.", "zh": "我们一起去公园散步吧。"}
# (preset name, language) → (measured, bound); n: the sentence's words or syllables. What Whisper got wrong:
PRESET_BOUNDS: dict[tuple[str, str], tuple[float, float]] = {
    ("Kindergarten teacher", "en"): (0.000, 0.10),  # n=18
    ("Kindergarten teacher", "zh"): (0.000, 0.10),  # n=10
    ("News anchor", "en"): (0.000, 0.10),  # n=16
    ("News anchor", "zh"): (0.000, 0.10),  # n=10
    # n=21, 5 misheard: "then a forest holder … They're lived to fox … the lie": the wide, slow intonation
    # (pitch range x1.5+) is the least intelligible English preset.
    ("Storyteller", "en"): (0.238, 0.35),
    ("Storyteller", "zh"): (0.000, 0.10),  # n=10
    ("ASMR", "en"): (0.000, 0.10),  # n=15: the breathy whisper is heard in full
    ("ASMR", "zh"): (0.000, 0.10),  # n=10
    ("Elderly narrator", "en"): (0.000, 0.10),  # n=18
    ("Elderly narrator", "zh"): (0.000, 0.10),  # n=10
    ("Game streamer", "en"): (0.053, 0.20),  # n=19: "Chat" heard as "Check"
    ("Game streamer", "zh"): (0.000, 0.10),  # n=10
    ("Documentary narrator", "en"): (0.111, 0.25),  # n=18: "the ice … few have" heard as "the eyes … you have"
    ("Documentary narrator", "zh"): (0.000, 0.10),  # n=10
    ("Meditation guide", "en"): (0.000, 0.10),  # n=17
    ("Meditation guide", "zh"): (0.000, 0.10),  # n=10
    ("Sad letter", "en"): (0.000, 0.10),  # n=18
    ("Sad letter", "zh"): (0.000, 0.10),  # n=10
    ("Angry customer", "en"): (0.000, 0.10),  # n=13
    ("Angry customer", "zh"): (0.000, 0.10),  # n=10
    ("Station announcer", "en"): (0.000, 0.10),  # n=15 ("platform 4 in 2 minutes": digits read back as words)
    ("Station announcer", "zh"): (0.000, 0.10),  # n=10
    ("睡前故事奶奶 (bedtime grandma)", "en"): (0.000, 0.15),  # n=7
    ("睡前故事奶奶 (bedtime grandma)", "zh"): (0.040, 0.15),  # n=25: 啊 heard as 啦
    ("新闻主播 (Chinese news anchor)", "en"): (0.000, 0.15),  # n=7
    ("新闻主播 (Chinese news anchor)", "zh"): (0.000, 0.10),  # n=18
    ("体育解说 (sports commentator)", "en"): (0.000, 0.15),  # n=7
    # n=20, 4 misheard: 球进了 as 球界冷, 本赛季 as 本來接 (excited, loud, fast, wide pitch: the hardest Chinese preset)
    ("体育解说 (sports commentator)", "zh"): (0.200, 0.30),
    ("甜美少女 (sweet girl)", "en"): (0.000, 0.15),  # n=7
    ("甜美少女 (sweet girl)", "zh"): (0.059, 0.20),  # n=17: 风筝 heard as 風中
    ("鬼故事 (ghost story)", "en"): (0.000, 0.15),  # n=7
    ("鬼故事 (ghost story)", "zh"): (0.000, 0.10),  # n=25 (走狼进头 … 呼明呼按: homophones, heard right)
    # n=7, 2 misheard: "The garden" heard as "Begarden": the child's voice (pitch and formants up) on the low
    # English voice blurs the first word.
    ("小男孩 (little boy)", "en"): (0.286, 0.45),
    ("小男孩 (little boy)", "zh"): (0.000, 0.10),  # n=19
}
MIXED_HEARD = "我今天用 VoiceLab 做了一个 demo，效果很好。"  # the UI's Chinese example with English words in it
MIXED_PYTHON = "我们明天用 Python 写代码。"


@pytest.fixture(scope="module")
def service() -> Iterator[GenerationService]:
    threads = torch.get_num_threads()
    settings = Settings(device="cpu", torch_threads=1)
    engine = InprocClient(settings)
    try:
        yield GenerationService(engine, None, settings)
    finally:
        engine.close()
        torch.set_num_threads(threads)


def spoken(service: GenerationService, text: str, instruction: str = "", language: str = "auto") -> Heard:
    """Synthesise ``text`` (through the service, as a user would) and transcribe it in the text's language."""
    result = service.generate(GenerationRequest(text, instruction=instruction, seed=SEED, language=language)).first
    judged = "zh" if "zh" in result.result.language else "en"
    return listen(text, result.result.audio, result.result.sample_rate, judged)


def test_every_builtin_voice_has_a_listening_case(service: GenerationService) -> None:
    """The built-in backend's voices are its languages (registry "piper" and "mandarin" are each one of them alone)."""
    assert set(service.capabilities().languages) == set(VOICES)


@pytest.mark.parametrize("language", sorted(VOICES))
def test_each_builtin_voice_says_its_sentence(service: GenerationService, language: str) -> None:
    name, text, measured, bound = VOICES[language]
    heard = spoken(service, text, language=language)
    assert heard.transcript.language == language  # judged in the language the engine says the voice spoke
    assert heard.rate <= bound, f"{name}: {heard.describe()} (bound {bound}, measured {measured})"


def preset_text(preset: Preset, language: str) -> str:
    return preset.sample_text if preset.language == language else OTHER_TEXT[language]


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("preset", PRESETS, ids=[p.name for p in PRESETS])
def test_a_preset_still_says_its_words(service: GenerationService, preset: Preset, language: str) -> None:
    measured, bound = PRESET_BOUNDS[(preset.name, language)]
    heard = spoken(service, preset_text(preset, language), instruction=preset.instruction)
    assert heard.rate <= bound, f"{preset.name} ({language}): {heard.describe()} (bound {bound}, measured {measured})"


def han_only(text: str) -> str:
    return "".join(re.findall(r"[\u3400-\u9fff\uf900-\ufaff]", text))


def latin_letters(text: str) -> str:
    return re.sub(r"[^a-z]", "", text.lower())


@pytest.fixture(scope="module")
def mixed(service: GenerationService) -> dict[str, Heard]:
    """The mixed texts, each synthesised once and transcribed whole, as Chinese."""
    return {text: spoken(service, text) for text in (MIXED_HEARD, MIXED_PYTHON)}


def test_mixed_text_keeps_both_runs(mixed: dict[str, Heard]) -> None:
    """Both languages are heard in the joined clip a user gets, in order.

    The whole clip is transcribed as Chinese (Whisper writes the English words it hears in Latin letters), not
    each run alone: that would only test each voice again, and miss a run dropped or misplaced where the runs
    are joined. Chinese is scored on its characters, English by its words' letters in order.
    """
    heard = mixed[MIXED_HEARD]
    chinese = pinyin_error_rate(han_only(MIXED_HEARD), han_only(heard.transcript.text))
    assert chinese <= 0.10, f"Chinese runs: {heard.describe()}"  # measured 0.000 (12 syllables)
    assert re.search("voice.*lab.*demo", latin_letters(heard.transcript.text)), heard.describe()  # "Voice Lab", "Demo"


def test_mixed_text_keeps_the_chinese_around_an_english_word(mixed: dict[str, Heard]) -> None:
    heard = mixed[MIXED_PYTHON]
    chinese = pinyin_error_rate(han_only(MIXED_PYTHON), han_only(heard.transcript.text))
    assert chinese <= 0.15, f"Chinese runs: {heard.describe()}"  # measured 0.000 (8 syllables): 我们明天用 鞋带码


@pytest.mark.xfail(
    strict=True,
    reason="a lone English word starting a Piper run is misheard: Whisper hears 'Python' here as nothing "
    "(我们明天用 鞋带码), the run alone as 'Hi, then.', and even 'Python is a language.' alone as 'Heighten is a "
    "language.' (also 'Pizza is good.' as 'He says good.'); inside a sentence ('We use Python.') it is heard",
)
def test_mixed_text_a_lone_english_word_is_heard(mixed: dict[str, Heard]) -> None:
    heard = mixed[MIXED_PYTHON]
    assert "python" in latin_letters(heard.transcript.text), heard.describe()


REFUSED = "which no loaded voice can read; VoiceLab speaks English and Chinese."


@pytest.mark.parametrize(
    ("text", "sentence"),
    [
        ("こんにちは、世界", f"The text contains Japanese kana, {REFUSED}"),  # 世界 alone would be read: Han
        ("مرحبا بالعالم", f"The text contains Arabic, {REFUSED}"),
        ("Привет, мир", f"The text contains Cyrillic, {REFUSED}"),
        ("Привет, こんにちは", f"The text contains Cyrillic and Japanese kana, {REFUSED}"),
    ],
)
def test_writing_no_voice_reads_gets_its_sentence(service: GenerationService, text: str, sentence: str) -> None:
    with pytest.raises(InvalidTextError) as caught:
        service.generate(GenerationRequest(text, seed=SEED))
    assert str(caught.value) == sentence
