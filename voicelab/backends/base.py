"""The small protocol every synthesis backend implements (tensor in, audio out)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from voicelab.engine.messages import Capabilities


@dataclass(frozen=True)
class VitsControls:
    """Sampling controls; ``None`` means the voice's default from its config."""

    length_scale: float | None = None
    noise_scale: float | None = None
    noise_w: float | None = None


class Backend(Protocol):
    name: str

    def load(self, device: str, dtype: str) -> None: ...

    def unload(self) -> None: ...

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def defaults(self) -> VitsControls:
        """The voice's default controls (so styles can scale them)."""
        ...

    def text_to_sentences(self, text: str) -> list[Sequence[int]]:
        """Split text into sentences of model input ids; raises InvalidTextError if nothing can be voiced."""
        ...

    def synthesize(
        self, sentences: Sequence[Sequence[int]], controls: VitsControls, generator: torch.Generator | None
    ) -> list[np.ndarray]:
        """One float32 waveform per sentence, computed as one padded batch (or a few)."""
        ...
