"""The voice CosyVoice uses when a request brings no prompt (the engine's warm-up, a Speak without a voice).

CosyVoice2/3 always clone; upstream ships no default speaker for them. This is a neutral, synthetic 3 s clip
(a 120 Hz pulse train with gentle vibrato through three vowel formants, shaped into syllables), not anyone's
recording, so such requests are answered (in cross-lingual mode) instead of refused. Deterministic.
"""

from __future__ import annotations

import hashlib

import numpy as np
from scipy.signal import lfilter

from voicelab.voice.prompt import PromptAudio

RATE = 16000
FORMANTS = ((700.0, 110.0), (1220.0, 120.0), (2600.0, 160.0))  # an open vowel, (centre Hz, bandwidth Hz)


def _resonate(signal: np.ndarray, centre: float, bandwidth: float) -> np.ndarray:
    radius = np.exp(-np.pi * bandwidth / RATE)
    theta = 2 * np.pi * centre / RATE
    return lfilter([1 - radius], [1, -2 * radius * np.cos(theta), radius**2], signal)


def default_prompt(seconds: float = 3.0) -> PromptAudio:
    t = np.arange(int(seconds * RATE)) / RATE
    phase = np.cumsum(2 * np.pi * (120 + 6 * np.sin(2 * np.pi * 5 * t)) / RATE)
    source = (np.diff(np.floor(phase / (2 * np.pi)), prepend=0) > 0).astype(np.float64)
    source += 0.01 * np.random.default_rng(0).standard_normal(len(t))
    voiced = sum(_resonate(source, c, b) for c, b in FORMANTS)
    envelope = np.clip(np.sin(2 * np.pi * 2.5 * t), 0, None) ** 0.5  # two and a half syllables a second
    audio = voiced * envelope
    samples = (0.3 * audio / np.max(np.abs(audio))).astype(np.float32)
    return PromptAudio(samples, RATE, hashlib.sha256(samples.tobytes()).hexdigest())
