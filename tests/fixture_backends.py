"""Tiny deterministic backends for engine tests: tones instead of speech, with scripted faults.

Text "sleep 3" sleeps 3 s inside synthesis; text containing "crash!" kills the worker process the way a
native-code fault would (no Python cleanup). Used through the backend registry as
"tests.fixture_backends:ToneBackend", which the spawned worker imports itself.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator

import numpy as np

from voicelab.backends.base import AudioChunk, Capabilities, MemoryGuard, OptionSpec, SpeechRequest, run_plainly
from voicelab.errors import BackendLoadError, InvalidTextError
from voicelab.settings import Settings

SAMPLE_RATE = 16000
SECONDS_PER_CHAR = 0.02


def tone(seconds: float, hz: float = 220.0) -> np.ndarray:
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


class ToneBackend:
    name = "tone"

    def __init__(self, settings: Settings) -> None:
        if settings.voice_path and not os.path.exists(settings.voice_path):
            raise BackendLoadError(f"The voice file {settings.voice_path} does not exist.")
        self.device = "cpu"

    def load(self, device: str, dtype: str) -> None:
        self.device = device

    def unload(self) -> None:
        pass

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            languages=("en",), sample_rate=SAMPLE_RATE, options=(OptionSpec("noise_scale", "Noise scale", 0, 2, 0.667),)
        )

    def synthesize(self, request: SpeechRequest, guard: MemoryGuard = run_plainly) -> Iterator[AudioChunk]:
        sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", request.text) if s.strip()]
        if not sentences:
            raise InvalidTextError("Please type some text to speak.")
        pieces = []
        for index, text in enumerate(sentences):
            if "crash!" in text:
                os._exit(3)
            match = re.search(r"sleep (\d+(?:\.\d+)?)", text)
            if match:
                time.sleep(float(match.group(1)))
            if index:
                pieces.append(np.zeros(round(request.sentence_silence_s * SAMPLE_RATE), np.float32))
            pieces.append(tone(len(text) * SECONDS_PER_CHAR / request.speed))
        yield AudioChunk(np.concatenate(pieces), SAMPLE_RATE, request.text)


class DeviceToneBackend(ToneBackend):
    """The tone made by torch on the worker's device (a CUDA device on a GPU box): what a GPU replica of
    ``serve --ray`` needs to show its VRAM and allocator without a voice's weights ("tests.fixture_backends:
    DeviceToneBackend")."""

    name = "device-tone"

    def load(self, device: str, dtype: str) -> None:
        import torch

        self.device = device
        self.buffer: torch.Tensor | None = torch.zeros(16 * 2**20, device=device)  # 64 MiB, as weights would hold

    def unload(self) -> None:
        self.buffer = None

    def synthesize(self, request: SpeechRequest, guard: MemoryGuard = run_plainly) -> Iterator[AudioChunk]:
        import torch

        for chunk in super().synthesize(request, guard):
            samples = torch.from_numpy(chunk.audio).to(self.device) * 1.0  # the arithmetic runs on the device
            yield AudioChunk(samples.cpu().numpy(), chunk.sample_rate, chunk.text, chunk.language)
