"""Checks on user text and controls, shared by the UI (before queueing) and the engine (torch-free)."""

from __future__ import annotations

import unicodedata

import numpy as np

from voicelab.errors import InvalidSettingError, InvalidTextError

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
