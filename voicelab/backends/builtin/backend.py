"""BuiltinVoices: one backend that speaks English and Chinese, each run of text by its own voice.

"auto" splits the text into runs by script (``voicelab.backends.scripts``): Han characters to the Mandarin
voice, Latin letters to the English voice, digits and punctuation with their neighbours. Each run is
synthesised by its voice, resampled to one output rate (Piper's 22.05 kHz, so English alone is exactly
Piper's output) and joined in order: a short breath between runs inside a sentence, the configured sentence
silence where a run ends a sentence. An explicit language sends the whole text to that voice.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from math import gcd

import numpy as np
from scipy.signal import resample_poly

from voicelab.backends.base import AudioChunk, Backend, Capabilities, MemoryGuard, SpeechRequest, run_plainly
from voicelab.backends.mandarin.backend import MandarinBackend
from voicelab.backends.piper.backend import PiperBackend
from voicelab.backends.scripts import Run, split_runs
from voicelab.settings import Settings

RUN_GAP_S = 0.08  # between runs of different languages inside one sentence
SENTENCE_END = re.compile(r"[.!?。！？；;…]\s*$")


class BuiltinVoices:
    name = "builtin"

    def __init__(self, voices: dict[str, Backend]) -> None:
        self.voices = voices
        first = next(iter(voices.values()))
        self.sample_rate = first.capabilities.sample_rate

    @property
    def capabilities(self) -> Capabilities:
        parts = [voice.capabilities for voice in self.voices.values()]
        dtypes = tuple(d for d in parts[0].dtypes if all(d in p.dtypes for p in parts))
        return Capabilities(
            languages=tuple(self.voices),
            sample_rate=self.sample_rate,
            streaming=True,
            dtypes=dtypes,
            options=tuple(o for p in parts for o in p.options),
            native_pitch_languages=tuple(lang for p in parts for lang in p.native_pitch_languages),
        )

    def load(self, device: str, dtype: str) -> None:
        for voice in self.voices.values():
            voice.load(device, dtype)

    def unload(self) -> None:
        for voice in self.voices.values():
            voice.unload()

    def runs(self, request: SpeechRequest) -> list[Run]:
        if request.language in self.voices:
            return [Run(request.language, request.text)]
        return [run for run in split_runs(request.text, next(iter(self.voices))) if run.text.strip()]

    def synthesize(self, request: SpeechRequest, guard: MemoryGuard = run_plainly) -> Iterator[AudioChunk]:
        """Each run's chunks in order, at one sample rate, with the gap its boundary needs before it."""
        previous = ""
        for run in self.runs(request):
            voice = self.voices[run.language]
            options = {k: v for k, v in request.options.items() if voice.capabilities.option(k) is not None}
            speech = replace(request, text=run.text, language=run.language, options=options)
            for index, chunk in enumerate(voice.synthesize(speech, guard)):
                audio = self._resampled(chunk)
                if index == 0 and previous:
                    gap_s = request.sentence_silence_s if SENTENCE_END.search(previous) else RUN_GAP_S
                    audio = np.concatenate([np.zeros(round(gap_s * self.sample_rate), np.float32), audio])
                yield AudioChunk(audio, self.sample_rate, chunk.text, run.language)
            previous = run.text

    def _resampled(self, chunk: AudioChunk) -> np.ndarray:
        if chunk.sample_rate == self.sample_rate:
            return chunk.audio
        common = gcd(chunk.sample_rate, self.sample_rate)
        up, down = self.sample_rate // common, chunk.sample_rate // common
        return np.asarray(resample_poly(chunk.audio, up, down), dtype=np.float32)


def create(settings: Settings) -> BuiltinVoices:
    """English from ``--voice-path`` (the built-in Joe voice when empty) and the built-in Mandarin voice."""
    return BuiltinVoices({"en": PiperBackend(settings.voice_path or None), "zh": MandarinBackend()})
