"""The listening judge for tests: one Whisper model per test process, and the check tests share.

The model (~145 MB, ~1 s to load) is built once per pytest worker by a cached factory rather than per module,
since several files listen (``--dist loadfile`` runs a file wholly on one worker). One CPU thread, float32 (the
judge's own default: int8 hears differently on Intel and AMD CPUs): the suite runs two workers on two cores.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from voicelab.judges.text import error_rate
from voicelab.judges.whisper import Transcript, WhisperJudge


@functools.cache
def whisper_judge() -> WhisperJudge:
    """The process's judge; it loads on its first transcription."""
    return WhisperJudge(device="cpu", threads=1)


@dataclass(frozen=True)
class Heard:
    """What Whisper heard of a clip, and its error rate against the text that was spoken."""

    text: str
    transcript: Transcript
    rate: float

    def describe(self) -> str:
        return f"error {self.rate:.3f}: heard {self.transcript.text!r} for {self.text!r}"


def listen(text: str, audio: np.ndarray, sample_rate: int, language: str) -> Heard:
    """Transcribe ``audio`` as ``language`` and score it against ``text`` (WER for "en", pinyin CER for "zh")."""
    transcript = whisper_judge().transcribe(audio, sample_rate, language)
    return Heard(text, transcript, error_rate(text, transcript.text, language))


def assert_heard(text: str, audio: np.ndarray, sample_rate: int, language: str, bound: float) -> Heard:
    """Whisper heard ``text`` in ``audio`` with an error rate of at most ``bound``."""
    heard = listen(text, audio, sample_rate, language)
    assert heard.rate <= bound, f"{language} {heard.describe()} (bound {bound})"
    return heard
