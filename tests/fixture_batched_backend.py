"""A tiny backend with a batched entry point, for the engine's micro-batching tests (no model, tones).

Each sentence is a tone whose pitch is set by the request's seed, so a mix-up between jobs shows in the audio.
"fail!" in a sentence fails that request alone (as a model error would), "crash!" kills the worker; "sleep N"
sleeps N seconds when its round runs, which holds the device while other jobs queue. Every batch size run is
recorded in a file named by ``voice_path`` (when set), one line per batch, so a test in another process can see
what the worker batched.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from voicelab.backends.base import AudioChunk, BatchEvent, Capabilities, MemoryGuard, SpeechRequest, run_plainly
from voicelab.errors import BackendRuntimeError, InvalidTextError
from voicelab.settings import Settings

SAMPLE_RATE = 16000
SECONDS_PER_CHAR = 0.01


def sentences_of(text: str) -> list[str]:
    found = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]
    if not found:
        raise InvalidTextError("Please type some text to speak.")
    return found


def sentence_tone(text: str, seed: int) -> np.ndarray:
    if "crash!" in text:
        os._exit(3)  # as a native-code fault would: no Python cleanup
    if "fail!" in text:
        raise BackendRuntimeError("The voice could not say this sentence.")
    match = re.search(r"sleep (\d+(?:\.\d+)?)", text)
    if match:
        time.sleep(float(match.group(1)))
    t = np.arange(int(len(text) * SECONDS_PER_CHAR * SAMPLE_RATE)) / SAMPLE_RATE
    return (0.3 * np.sin(2 * np.pi * (200.0 + seed % 300) * t)).astype(np.float32)


class BatchedToneBackend:
    name = "batched-tone"

    def __init__(self, settings: Settings) -> None:
        self.log = Path(settings.voice_path) if settings.voice_path else None

    def load(self, device: str, dtype: str) -> None:
        pass

    def unload(self) -> None:
        pass

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            languages=("en",), sample_rate=SAMPLE_RATE, streaming=True, batching=True, batch_bytes_per_char=1000
        )

    def synthesize(self, request: SpeechRequest, guard: MemoryGuard = run_plainly) -> Iterator[AudioChunk]:
        for index, text in enumerate(sentences_of(request.text)):
            yield self._chunk(text, request, index)

    def synthesize_batch(
        self, requests: Sequence[SpeechRequest], guard: MemoryGuard = run_plainly
    ) -> Iterator[BatchEvent]:
        """Round r: sentence r of every request still going, all at once (one recorded batch)."""
        texts = [sentences_of(r.text) for r in requests]
        live = set(range(len(requests)))
        for r in range(max(len(t) for t in texts)):
            members = [i for i in sorted(live) if r < len(texts[i])]
            if self.log is not None:
                with self.log.open("a") as out:
                    out.write(f"{len(members)}\n")
            for i in members:
                try:
                    chunk = self._chunk(texts[i][r], requests[i], r)
                except BackendRuntimeError as exc:
                    live.discard(i)
                    yield BatchEvent(i, error=exc, last=True)
                    continue
                yield BatchEvent(i, chunk=chunk, last=r == len(texts[i]) - 1)

    def _chunk(self, text: str, request: SpeechRequest, index: int) -> AudioChunk:
        wave = sentence_tone(text, request.seed)
        if index:
            wave = np.concatenate([np.zeros(round(request.sentence_silence_s * SAMPLE_RATE), np.float32), wave])
        return AudioChunk(wave, SAMPLE_RATE, text, request.language)
