"""One request through the backend: text checks, sentences, one padded batch, joined audio."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from voicelab.backends.base import Backend, VitsControls

log = logging.getLogger(__name__)


def join_with_silence(pieces: Sequence[np.ndarray], sample_rate: int, silence_s: float) -> np.ndarray:
    gap = np.zeros(round(silence_s * sample_rate), dtype=np.float32)
    out: list[np.ndarray] = []
    for index, piece in enumerate(pieces):
        if index:
            out.append(gap)
        out.append(piece.astype(np.float32, copy=False))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)


@dataclass(frozen=True)
class SpeechDraft:
    """Backend output before any voice matching or style rendering."""

    audio: np.ndarray
    sample_rate: int
    sentences: int


def synthesize_text(
    backend: Backend,
    text: str,
    controls: VitsControls,
    silence_s: float,
    generator: torch.Generator | None,
    run_batch: Callable[[Callable[[], list[np.ndarray]], Callable[[], list[np.ndarray]]], list[np.ndarray]]
    | None = None,
) -> SpeechDraft:
    """Sentences as one padded batch; ``run_batch(full, pieces)`` lets the caller retry after OOM in pieces."""
    sentences = backend.text_to_sentences(text)

    def full() -> list[np.ndarray]:
        return backend.synthesize(sentences, controls, generator)

    def pieces() -> list[np.ndarray]:
        return [audio for sentence in sentences for audio in backend.synthesize([sentence], controls, generator)]

    waves = run_batch(full, pieces) if run_batch else full()
    sample_rate = backend.capabilities.sample_rate
    return SpeechDraft(join_with_silence(waves, sample_rate, silence_s), sample_rate, len(sentences))
