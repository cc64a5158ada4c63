"""Intelligibility check: offline English recognition (pocketsphinx's bundled model) and word error rate."""

from __future__ import annotations

import re

import numpy as np
from pocketsphinx import Decoder

from voicelab.voice.analysis import resample

ASR_RATE = 16000
_WORD = re.compile(r"[a-z0-9']+")


def normalise_words(text: str) -> list[str]:
    """Lower-case words without punctuation (apostrophes kept, as in the recogniser's dictionary)."""
    return _WORD.findall(text.lower().replace("\u2019", "'"))


def word_error_rate(reference: str, hypothesis: str) -> float:
    """(substitutions + deletions + insertions) / reference words, by word-level edit distance."""
    ref, hyp = normalise_words(reference), normalise_words(hypothesis)
    if not ref:
        return 0.0 if not hyp else 1.0
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, start=1):
        current = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, start=1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h))
        previous = current
    return previous[-1] / len(ref)


class Recognizer:
    """pocketsphinx with its bundled US English acoustic model, language model and dictionary."""

    def __init__(self) -> None:
        self._decoder = Decoder(samprate=ASR_RATE, loglevel="FATAL")

    def transcribe(self, audio: np.ndarray, sr: int) -> str:
        pcm = (np.clip(resample(audio, sr, ASR_RATE), -1.0, 1.0) * 32767.0).astype(np.int16).tobytes()
        self._decoder.start_utt()
        self._decoder.process_raw(pcm, full_utt=True)
        self._decoder.end_utt()
        hyp = self._decoder.hyp()
        return hyp.hypstr if hyp is not None else ""
