"""A validated voice prompt, and the one check every prompt passes before the engine uses it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from voicelab.errors import InvalidPromptError

MIN_PROMPT_S = 1.0
MAX_PROMPT_S = 30.0
# The one prompt-length rule, worded the same in the Clone tab's label, the API's field, refusals and the README.
PROMPT_RULE = "1 to 30 s of one person speaking (past 30 s, only the first 30 s are used)"
SILENCE_PEAK = 1e-4  # -80 dBFS


@dataclass(frozen=True)
class PromptAudio:
    """A voice prompt: mono float32 samples, already trimmed and loudness-normalised by intake.

    ``sha256`` is the hash of the decoded samples and keys the speaker-profile cache.
    ``transcript`` is what the prompt says ("" when unknown); neural cloning backends use it.
    ``notices`` are sentences for the user about what intake changed (e.g. "only the first 30 s were used").
    """

    samples: np.ndarray
    sample_rate: int
    sha256: str
    transcript: str = ""
    notices: tuple[str, ...] = ()

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.sample_rate if self.sample_rate > 0 else 0.0


def check_prompt_audio(prompt: PromptAudio) -> None:
    """Refuse a prompt that is too short, silent or damaged, with the sentence a user sees.

    Intake ends with this check; the validator runs it on every request, so a prompt built by an API
    caller (not through intake) is held to the same rule, cached profile or not.
    """
    samples = np.asarray(prompt.samples)
    if samples.ndim != 1 or prompt.sample_rate <= 0 or len(samples) < MIN_PROMPT_S * prompt.sample_rate:
        raise InvalidPromptError(f"The voice prompt is too short; a voice prompt is {PROMPT_RULE}.")
    if not np.isfinite(samples).all() or float(np.max(np.abs(samples))) < SILENCE_PEAK:
        raise InvalidPromptError("The voice prompt is silent or damaged; please record someone speaking.")
