"""A tiny deterministic backend for engine tests: tones instead of speech, with scripted faults.

Text "sleep 3" sleeps 3 s inside synthesis; text containing "crash!" kills the worker process the way a
native-code fault would (no Python cleanup). Used through the backend registry as
"tests.fixture_backends:ToneBackend", which the spawned worker imports itself.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence

import numpy as np
import torch

from voicelab.backends.base import VitsControls
from voicelab.engine.messages import Capabilities
from voicelab.errors import BackendLoadError, InvalidTextError

SAMPLE_RATE = 16000
SECONDS_PER_CHAR = 0.02


class ToneBackend:
    name = "tone"

    def __init__(self, voice_path: str | None = None) -> None:
        if voice_path and not os.path.exists(voice_path):
            raise BackendLoadError(f"The voice file {voice_path} does not exist.")
        self.device = "cpu"

    def load(self, device: str, dtype: str) -> None:
        self.device = device

    def unload(self) -> None:
        pass

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(clone=False, instruct=False, languages=("en",), streaming=False, sample_rate=SAMPLE_RATE)

    @property
    def defaults(self) -> VitsControls:
        return VitsControls(1.0, 0.667, 0.8)

    def text_to_sentences(self, text: str) -> list[Sequence[int]]:
        sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]
        if not sentences:
            raise InvalidTextError("Please type some text to speak.")
        return [[ord(c) for c in s] for s in sentences]

    def synthesize(
        self, sentences: Sequence[Sequence[int]], controls: VitsControls, generator: torch.Generator | None
    ) -> list[np.ndarray]:
        out = []
        for ids in sentences:
            text = "".join(map(chr, ids))
            if "crash!" in text:
                os._exit(3)
            match = re.search(r"sleep (\d+(?:\.\d+)?)", text)
            if match:
                time.sleep(float(match.group(1)))
            n = int(len(ids) * SECONDS_PER_CHAR * (controls.length_scale or 1.0) * SAMPLE_RATE)
            t = np.arange(n) / SAMPLE_RATE
            out.append((0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32))
        return out
