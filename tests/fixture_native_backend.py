"""A second backend in one file: native cloning, native instructions and streaming, as a neural model would.

It proves the plug-in contract (``docs/ARCHITECTURE.md``): nothing outside this file changes for the service,
the engine and the UI to drive it, by its "module:factory" path. What it "says" is derived from what it was
given, so tests can hear that the engine passed the prompt, style and instruction through untouched:
each sentence is a tone at the prompt's median pitch (220 Hz without a prompt), 0.05 s per character
divided by the speed, louder by the style's volume, and one chunk per sentence, in order.

A test can hold a job in flight for as long as it needs (``--backend-options gate_file=PATH``): a sentence that is
exactly :data:`HOLD` is spoken only once that file exists, so "the job is still running" holds by construction.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from voicelab.backends.base import AudioChunk, Capabilities, MemoryGuard, SpeechRequest, run_plainly
from voicelab.errors import InvalidTextError
from voicelab.settings import Settings

SAMPLE_RATE = 24000
SECONDS_PER_CHAR = 0.05
CHUNK_DELAY_S = 0.3  # each later sentence "takes" this long (``--backend-options chunk_delay_s=...``)
HOLD = "Hold on."  # a sentence that waits for the gate file (``--backend-options gate_file=...``)
GATE_LIMIT_S = 120.0  # a test that never opens its gate fails on its own assertion, not by hanging here


def prompt_pitch_hz(samples: np.ndarray, sample_rate: int) -> float:
    """The strongest periodicity between 70 and 400 Hz (autocorrelation over the whole clip)."""
    x = samples[: sample_rate * 5] - np.mean(samples[: sample_rate * 5])
    corr = np.correlate(x, x, mode="full")[len(x) - 1 :]
    low, high = sample_rate // 400, sample_rate // 70
    return sample_rate / (low + int(np.argmax(corr[low:high])))


class NativeCloneBackend:
    name = "native-test"

    def __init__(self, settings: Settings) -> None:
        self.device = "cpu"
        self.chunk_delay_s = float(settings.backend_option("chunk_delay_s", str(CHUNK_DELAY_S)))
        gate = settings.backend_option("gate_file")
        self.gate = Path(gate) if gate else None
        self.fit_steps = int(settings.backend_option("fit_steps", "0"))  # a prompt's "fit" reports this many steps

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            languages=("en", "zh"),
            sample_rate=SAMPLE_RATE,
            native_cloning=True,
            native_instructions=True,
            streaming=True,
        )

    def load(self, device: str, dtype: str) -> None:
        self.device = device

    def unload(self) -> None:
        pass

    def synthesize(self, request: SpeechRequest, guard: MemoryGuard = run_plainly) -> Iterator[AudioChunk]:
        sentences = [s for s in re.split(r"(?<=[.!?。！？])\s*", request.text) if s.strip()]
        if not sentences:
            raise InvalidTextError("Please type some text to speak.")
        hz = prompt_pitch_hz(request.prompt.samples, request.prompt.sample_rate) if request.prompt else 220.0
        if request.prompt is not None and request.on_fit is not None:
            for step in range(1, self.fit_steps + 1):
                request.on_fit.progress(step, self.fit_steps)
        gain = 10 ** ((request.style.volume_db or 0.0) / 20)
        for index, sentence in enumerate(sentences):
            if index:
                time.sleep(self.chunk_delay_s)
            if sentence == HOLD:
                self.wait_for_gate()
            seconds = len(sentence) * SECONDS_PER_CHAR / request.speed
            t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
            wave = (0.1 * gain * np.sin(2 * np.pi * hz * t)).astype(np.float32)
            gap = np.zeros(round(request.sentence_silence_s * SAMPLE_RATE) if index else 0, np.float32)
            yield AudioChunk(np.concatenate([gap, wave]), SAMPLE_RATE, sentence)

    def wait_for_gate(self) -> None:
        """Until the test creates the gate file (without a gate configured, at once)."""
        deadline = time.monotonic() + GATE_LIMIT_S
        while self.gate is not None and not self.gate.exists() and time.monotonic() < deadline:
            time.sleep(0.01)


def create(settings: Settings) -> NativeCloneBackend:
    return NativeCloneBackend(settings)
