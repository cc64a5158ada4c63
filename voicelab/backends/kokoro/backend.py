"""KokoroBackend: Kokoro-82M in our PyTorch behind the Backend protocol, its voice fitted to each prompt.

Without a prompt it speaks with a voice pack (``DEFAULT_VOICE``). With one (native cloning), the style vector is
fitted to the prompt once (``fitting.StyleFitter``, progress in the log: "fitting voice: step 40 of 120") and kept
in a bounded LRU keyed by the prompt's sha256, so every later request with that voice costs plain synthesis.
One sentence per model call (the model carries no padding mask); streaming is by sentence.
"""

from __future__ import annotations

import functools
import gc
import logging
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import torch

from voicelab.backends.base import AudioChunk, Capabilities, MemoryGuard, SpeechRequest, run_plainly
from voicelab.backends.builtin.backend import BuiltinVoices
from voicelab.backends.kokoro.config import SAMPLE_RATE
from voicelab.backends.kokoro.fitting import FitSettings, FittedVoice, StyleFitter
from voicelab.backends.kokoro.frontend import KokoroFrontend, KokoroSentence
from voicelab.backends.kokoro.model import KokoroModel
from voicelab.backends.kokoro.voices import DEFAULT_VOICE, VoicePacks, read_voice_packs
from voicelab.backends.kokoro.weights import load_kokoro_model
from voicelab.backends.mandarin.backend import MandarinBackend
from voicelab.backends.torch_device import checked_device
from voicelab.errors import BackendLoadError, InvalidSettingError
from voicelab.lru import BoundedLRU
from voicelab.settings import Settings
from voicelab.voice.prompt import PromptAudio

logger = logging.getLogger(__name__)
FITTED_VOICES = 16  # fitted style vectors kept (256 floats each, plus the prompt's figures)


class KokoroBackend:
    """English from espeak-ng phonemes; a prompt's voice by a fitted style vector (see the module docstring)."""

    name = "kokoro"

    def __init__(self, fit: FitSettings | None = None, voice: str = DEFAULT_VOICE) -> None:
        self.frontend = KokoroFrontend()
        self.packs: VoicePacks = read_voice_packs()
        if voice not in self.packs.packs:
            raise InvalidSettingError(f"Unknown Kokoro voice {voice!r}; choose one of {', '.join(self.packs.packs)}.")
        self.voice = voice
        self.fit_settings = fit or FitSettings()
        self.device = "cpu"
        self._model: KokoroModel | None = None
        self._fitter: StyleFitter | None = None
        self.fitted: BoundedLRU[FittedVoice] = BoundedLRU(FITTED_VOICES)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(languages=("en",), sample_rate=SAMPLE_RATE, native_cloning=True, streaming=True)

    def load(self, device: str, dtype: str) -> None:
        """float32 only (the int8 source leaves nothing to gain from half precision in the fit's gradients)."""
        if dtype != "float32":
            raise InvalidSettingError("The Kokoro voice runs in float32 only.")
        target = checked_device(device)
        self._model = load_kokoro_model(str(target))
        self._fitter = None
        self.device = str(target)
        logger.info("loaded Kokoro-82M on %s", self.device)

    def unload(self) -> None:
        self._model = self._fitter = None
        self.fitted.clear()
        gc.collect()
        if self.device.startswith("cuda") and torch.cuda.is_available():
            torch.cuda.empty_cache()

    @property
    def model(self) -> KokoroModel:
        if self._model is None:
            raise BackendLoadError("The Kokoro voice is not loaded.")
        return self._model

    def fitter(self) -> StyleFitter:
        if self._fitter is None:
            self._fitter = StyleFitter(self.model, self.frontend, self.packs, self.device, self.fit_settings)
        return self._fitter

    def fitted_voice(self, prompt: PromptAudio) -> FittedVoice:
        """The prompt's fitted style (fitted now on first use, then from the LRU)."""
        cached = self.fitted.get(prompt.sha256)
        if cached is None:
            cached = self.fitter().fit(prompt)
            self.fitted.put(prompt.sha256, cached)
        return cached

    def style_for(self, request: SpeechRequest, n_tokens: int) -> torch.Tensor:
        """[1, 256] on the device: the fitted vector for a prompt, else the pack's row for this length."""
        if request.prompt is not None:
            return self.fitted_voice(request.prompt).style.to(self.device)[None]
        return torch.from_numpy(self.packs.style(self.voice, n_tokens)).to(self.device)[None]

    def speak(
        self, sentence: KokoroSentence, style: torch.Tensor, speed: float, noise: torch.Generator | None
    ) -> np.ndarray:
        """One sentence's float32 waveform."""
        tokens = torch.tensor([[0, *sentence.ids, 0]], device=self.device)
        with torch.inference_mode():
            audio = self.model(tokens, style, speed, noise).audio
        return audio.float().cpu().numpy()

    def synthesize(self, request: SpeechRequest, guard: MemoryGuard = run_plainly) -> Iterator[AudioChunk]:
        """One chunk per sentence; every chunk but the first starts with the sentence silence."""
        sentences = self.frontend.sentences(request.text)
        noise = torch.Generator(device=self.device).manual_seed(request.seed) if self.fit_settings.noise else None
        silence = np.zeros(round(request.sentence_silence_s * SAMPLE_RATE), np.float32)
        for index, sentence in enumerate(sentences):
            style = self.style_for(request, len(sentence.ids))
            run = functools.partial(self.speak, sentence, style, request.speed, noise)
            audio = guard(run, run)  # one sentence is the smallest piece there is
            audio = np.clip(audio, -1.0, 1.0).astype(np.float32)
            if index:
                audio = np.concatenate([silence, audio])
            yield AudioChunk(audio, SAMPLE_RATE, sentence.text, "en")


class KokoroVoices(BuiltinVoices):
    """Kokoro for English and the built-in Mandarin voice for Chinese, routed by script as the built-in voices are.

    Natively cloning: the prompt reaches Kokoro, which fits its voice to it; Chinese runs are spoken by the
    Mandarin voice without signal-level matching (the engine adds none to a natively cloning backend).
    """

    name = "kokoro"

    @property
    def capabilities(self) -> Capabilities:
        return replace(super().capabilities, native_cloning=True, batching=False)


def create(settings: Settings) -> KokoroVoices:
    """Kokoro (English, fitted to each prompt) with the built-in Mandarin voice for Chinese."""
    return KokoroVoices({"en": KokoroBackend(), "zh": MandarinBackend()})
