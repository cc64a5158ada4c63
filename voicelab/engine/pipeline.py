"""One request through the backend: text checks, sentences, one padded batch, joined audio."""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from voicelab.backends.base import Backend, VitsControls
from voicelab.errors import InvalidSettingError, InvalidTextError

log = logging.getLogger(__name__)

CONTROL_LIMITS: dict[str, tuple[float, float]] = {
    "length_scale": (0.25, 4.0),
    "noise_scale": (0.0, 2.0),
    "noise_w": (0.0, 2.0),
    "sentence_silence_s": (0.0, 5.0),
}


def clean_text(text: str, max_chars: int) -> str:
    """Drop control characters and surrounding space; refuse empty or over-long text with the user's sentence."""
    if not isinstance(text, str):
        raise InvalidTextError("Please type some text to speak.")
    kept = "".join(ch if unicodedata.category(ch)[0] != "C" else " " for ch in text).strip()
    if not kept:
        raise InvalidTextError("Please type some text to speak.")
    if len(kept) > max_chars:
        raise InvalidTextError(
            f"The text is {len(kept):,} characters long; the limit is {max_chars:,}. Please shorten it or split it up."
        )
    return kept


def check_control(name: str, value: float | None) -> None:
    if value is None:
        return
    low, high = CONTROL_LIMITS[name]
    if not np.isfinite(value) or not low <= value <= high:
        raise InvalidSettingError(f"{name.replace('_', ' ').capitalize()} must be between {low} and {high}.")


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
