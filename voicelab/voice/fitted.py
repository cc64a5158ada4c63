"""A voice fitted to one prompt by a natively cloning backend: the speaker profile a saved voice keeps.

Kokoro's voice is one style vector fitted to the prompt by gradient descent (seconds on a GPU, minutes on a CPU).
The fit is the expensive part and its result is small (256 floats), so it is data that travels: the backend
reports it, the engine keeps it in its profile LRU and returns it with the result, the service stores it beside
the saved voice, and a later request carries it back, so no worker ever fits that voice again. Torch-free, so
the server process and the voice store can read and write it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

FLOAT_BYTES = 4  # the vector lives as float32 wherever a model uses it
F0_SCALES = (0.5, 2.0)  # an octave either way: a wider correction is a wrong measurement, not a voice


@dataclass(frozen=True)
class FittedStyle:
    """backend: the model the vector belongs to ("kokoro"); prompt_sha256: the prompt it was fitted to;
    vector: the fitted style; start_voice: the pack the fit started from; ge2e_start / ge2e_fitted: GE2E
    similarity to the prompt on the held-out sentence before and after; steps / seconds: what the fit took;
    f0_scale: what the model's F0 curve is multiplied by so that the voice speaks at the prompt's pitch (1.0 for
    a voice stored before the fit measured it)."""

    backend: str
    prompt_sha256: str
    vector: tuple[float, ...]
    start_voice: str
    ge2e_start: float
    ge2e_fitted: float
    steps: int
    seconds: float
    f0_scale: float = 1.0

    def __post_init__(self) -> None:
        if not self.vector or not all(math.isfinite(v) for v in self.vector):
            raise ValueError("a fitted style needs a non-empty vector of finite values")
        if not F0_SCALES[0] <= self.f0_scale <= F0_SCALES[1]:
            raise ValueError(f"a fitted style's F0 scale must lie in {F0_SCALES}, not {self.f0_scale}")

    @property
    def host_bytes(self) -> int:
        """What holding it costs (the panel's figure for fitted voices)."""
        return len(self.vector) * FLOAT_BYTES

    def fits(self, backend: str, prompt_sha256: str, size: int) -> bool:
        """Whether this vector is the voice of ``prompt_sha256`` for ``backend``'s model (``size`` values)."""
        return self.backend == backend and self.prompt_sha256 == prompt_sha256 and len(self.vector) == size

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "prompt_sha256": self.prompt_sha256,
            "vector": list(self.vector),  # exact: a kept voice speaks exactly as the fitted one did
            "start_voice": self.start_voice,
            "ge2e_start": self.ge2e_start,
            "ge2e_fitted": self.ge2e_fitted,
            "steps": self.steps,
            "seconds": self.seconds,
            "f0_scale": self.f0_scale,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FittedStyle:
        """The stored form back; a missing or mistyped field raises ``KeyError``/``TypeError``/``ValueError``."""
        return cls(
            backend=str(data["backend"]),
            prompt_sha256=str(data["prompt_sha256"]),
            vector=tuple(float(v) for v in data["vector"]),
            start_voice=str(data["start_voice"]),
            ge2e_start=float(data["ge2e_start"]),
            ge2e_fitted=float(data["ge2e_fitted"]),
            steps=int(data["steps"]),
            seconds=float(data["seconds"]),
            f0_scale=float(data.get("f0_scale", 1.0)),
        )
