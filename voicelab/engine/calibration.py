"""The sentences the engine has each voice say, and each voice measured once without style.

A voice's neutral figures (median pitch, rate, loudness) are what a style is set against; a backend with a voice of
each gender (``Capabilities.gendered_voice_languages``) has each measured on its own.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from voicelab.backends.scripts import languages_in
from voicelab.instruct.style import Gender
from voicelab.voice.measure import NeutralVoice, neutral_voice, spoken_units
from voicelab.voice.prompt import PromptAudio


class Calibrate(Protocol):
    """The backend voice (of ``gender``, where it voices one) saying ``text`` in ``language``."""

    def __call__(self, language: str, text: str, gender: Gender | None = None) -> tuple[np.ndarray, int]: ...


CALIBRATION_TEXTS = {
    "en": "The quick brown fox jumps over the lazy dog, then rests a while in the warm afternoon sun.",
    "zh": "今天天气很好，我们一起去公园散步，然后坐在树下聊天。",
}
# A sentence the match search never sees: its transform is kept only where it beats the unmatched voice here too.
HELD_OUT_TEXTS = {
    "en": "Glue the sheet to the dark blue background, then open the window and let the evening air in.",
    "zh": "他在图书馆借了三本关于历史的书，然后慢慢地走回了家。",
}
TRANSCRIPT_UNITS = (20, 400)  # a transcript this long (letters/characters) is the calibration sentence


def calibration_text(language: str, prompt: PromptAudio | None) -> str:
    """The prompt's own transcript where the voice speaks its language (the same words make the closest
    comparison to the prompt), else the fixed sentence of that language."""
    transcript = prompt.transcript.strip() if prompt is not None else ""
    low, high = TRANSCRIPT_UNITS
    if transcript and languages_in(transcript) == (language,) and low <= spoken_units(transcript) <= high:
        return transcript
    return CALIBRATION_TEXTS.get(language, CALIBRATION_TEXTS["en"])


class NeutralVoices:
    """Each voice of the backend without style, by language and (where the backend has one) gender, measured on
    its fixed sentence the first time it is asked for; cleared when the model unloads."""

    def __init__(self, device: str) -> None:
        self.device = device
        self._voices: dict[tuple[str, Gender | None], NeutralVoice] = {}

    def get(self, language: str, calibrate: Calibrate, gender: Gender | None = None) -> NeutralVoice:
        key = (language, gender)
        if key not in self._voices:
            text = CALIBRATION_TEXTS.get(language, CALIBRATION_TEXTS["en"])
            audio, sr = calibrate(language, text, gender)
            self._voices[key] = neutral_voice(audio, sr, text, self.device)
        return self._voices[key]

    def languages(self) -> set[str]:
        return {language for language, _ in self._voices}

    def __len__(self) -> int:
        return len(self._voices)

    def clear(self) -> None:
        self._voices.clear()
