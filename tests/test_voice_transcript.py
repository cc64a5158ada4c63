"""The prompt transcript is used: the matcher calibrates the voice on the prompt's own words."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from voicelab.engine.calibration import CALIBRATION_TEXTS, HELD_OUT_TEXTS, calibration_text
from voicelab.engine.core import EngineCore
from voicelab.engine.messages import SynthesisRequest
from voicelab.voice.intake import load_prompt
from voicelab.voice.prompt import PromptAudio

DATA = Path(__file__).parent / "data"
CLIP = DATA / "arctic_slt_en_female.wav"


def _prompt(transcript: str) -> PromptAudio:
    return PromptAudio(np.zeros(16000, np.float32), 16000, "a" * 64, transcript=transcript)


def test_a_transcript_in_the_voices_language_is_the_calibration_sentence() -> None:
    words = "Author of the danger trail, Philip Steels, etc."
    assert calibration_text("en", _prompt(words)) == words
    assert calibration_text("zh", _prompt(words)) == CALIBRATION_TEXTS["zh"]  # the English words, a Chinese voice
    assert calibration_text("en", _prompt("")) == CALIBRATION_TEXTS["en"]
    assert calibration_text("en", _prompt("Hi.")) == CALIBRATION_TEXTS["en"]  # too short to calibrate on
    chinese = "今天我们一起去公园散步，然后坐在树下聊天，看看风景。"
    assert calibration_text("zh", _prompt(chinese)) == chinese


def test_the_engine_calibrates_on_the_transcript(core: EngineCore, monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    original = core._calibration

    def spy(language: str, text: str) -> tuple[np.ndarray, int]:
        said.append(text)
        return original(language, text)

    monkeypatch.setattr(core, "_calibration", spy)
    transcript = (DATA / "arctic_slt_en_female.txt").read_text(encoding="utf-8").strip()
    prompt = load_prompt(CLIP, transcript)
    result = core.synthesize(SynthesisRequest(text="Good morning to you.", seed=1, prompt=prompt))
    assert said == [transcript, HELD_OUT_TEXTS["en"]]  # calibrated on its words, checked on a sentence unseen
    assert result.similarity is not None and result.similarity_base is not None
    assert result.similarity_ge2e is not None and result.similarity_ge2e_base is not None
    assert result.similarity_ge2e >= result.similarity_ge2e_base  # never below the unmatched voice, by the search's own
