"""KokoroBackend: Kokoro-82M in our PyTorch behind the Backend protocol, its voice fitted to each prompt.

Without a prompt it speaks with a voice pack (``DEFAULT_VOICE``). With one (native cloning), the style vector is
fitted to the prompt (``fitting.StyleFitter``; progress in the log and to ``SpeechRequest.on_fit``: "fitting voice:
step 40 of 120") unless the request carries the prompt's ``FittedStyle`` already. The backend keeps no voices of
its own: the fitted style is reported through ``on_fit.fitted``, and the engine keeps it in its profile LRU (and
the service with a saved voice), so every later request with that voice costs plain synthesis.
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

from voicelab.backends.base import AudioChunk, Capabilities, FitListener, MemoryGuard, SpeechRequest, run_plainly
from voicelab.backends.builtin.backend import BuiltinVoices, with_mandarin
from voicelab.backends.kokoro.config import SAMPLE_RATE, STYLE_DIM
from voicelab.backends.kokoro.fitting import FitSettings, StyleFitter
from voicelab.backends.kokoro.frontend import KokoroFrontend, KokoroSentence
from voicelab.backends.kokoro.model import KokoroModel
from voicelab.backends.kokoro.voices import DEFAULT_VOICE, FEMALE_VOICE, VoicePacks, read_voice_packs
from voicelab.backends.kokoro.weights import load_kokoro_model
from voicelab.backends.torch_device import checked_device
from voicelab.errors import BackendLoadError, InvalidSettingError
from voicelab.instruct.style import Gender
from voicelab.settings import Settings
from voicelab.voice.fitted import FittedStyle
from voicelab.voice.prompt import PromptAudio

logger = logging.getLogger(__name__)


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
        unknown = [name for name in self.fit_settings.start_voices if name not in self.packs.packs]
        if unknown:
            raise InvalidSettingError(f"Unknown Kokoro voice {unknown[0]!r} to start fits from.")
        self.device = "cpu"
        self._model: KokoroModel | None = None
        self._fitter: StyleFitter | None = None

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            languages=("en",),
            sample_rate=SAMPLE_RATE,
            native_cloning=True,
            streaming=True,
            gendered_voice_languages=("en",),
        )

    def voice_for(self, gender: Gender | None) -> str:
        """The pack that speaks without a prompt: a woman's pack where a woman's voice is asked, else the set one."""
        return FEMALE_VOICE if gender is Gender.FEMALE else DEFAULT_VOICE if gender is Gender.MALE else self.voice

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

    def fit(self, prompt: PromptAudio, listener: FitListener | None = None) -> FittedStyle:
        """The prompt's voice, fitted now (progress to ``listener``, which is also told the result). Gradients are
        switched back on here: the engine runs every backend call under ``torch.inference_mode``."""
        progress = listener.progress if listener is not None else None
        with torch.inference_mode(False), torch.enable_grad():
            voice = self.fitter().fit(prompt, progress)
        style = voice.profile(self.name, prompt.sha256)
        if listener is not None:
            listener.fitted(style)
        return style

    def voice_of(self, request: SpeechRequest) -> FittedStyle | None:
        """The request's fitted voice: the one it carries where it is this prompt's, else fitted now; ``None``
        without a prompt (the pack speaks)."""
        prompt = request.prompt
        if prompt is None:
            return None
        if request.fitted is not None and request.fitted.fits(self.name, prompt.sha256, STYLE_DIM):
            return request.fitted
        return self.fit(prompt, request.on_fit)

    def style_for(self, fitted: FittedStyle | None, n_tokens: int, voice: str) -> torch.Tensor:
        """[1, 256] on the device: the fitted vector, else the ``voice`` pack's row for this length."""
        if fitted is not None:
            return torch.tensor(fitted.vector, dtype=torch.float32, device=self.device)[None]
        return torch.from_numpy(self.packs.style(voice, n_tokens)).to(self.device)[None]

    def speak(
        self,
        sentence: KokoroSentence,
        style: torch.Tensor,
        speed: float,
        noise: torch.Generator | None,
        f0_scale: float = 1.0,
    ) -> np.ndarray:
        """One sentence's float32 waveform (``f0_scale``: a fitted voice's pitch correction)."""
        tokens = torch.tensor([[0, *sentence.ids, 0]], device=self.device)
        with torch.inference_mode():
            audio = self.model(tokens, style, speed, noise, f0_scale).audio
        return audio.float().cpu().numpy()

    def synthesize(self, request: SpeechRequest, guard: MemoryGuard = run_plainly) -> Iterator[AudioChunk]:
        """One chunk per sentence; every chunk but the first starts with the sentence silence."""
        sentences = self.frontend.sentences(request.text)
        noise = torch.Generator(device=self.device).manual_seed(request.seed) if self.fit_settings.noise else None
        silence = np.zeros(round(request.sentence_silence_s * SAMPLE_RATE), np.float32)
        fitted = self.voice_of(request)  # once per request, before the first sentence
        f0_scale = fitted.f0_scale if fitted is not None else 1.0
        voice = self.voice_for(request.style.gender)
        for index, sentence in enumerate(sentences):
            style = self.style_for(fitted, len(sentence.ids), voice)
            run = functools.partial(self.speak, sentence, style, request.speed, noise, f0_scale)
            audio = guard(run, run)  # one sentence is the smallest piece there is
            audio = np.clip(audio, -1.0, 1.0).astype(np.float32)
            if index:
                audio = np.concatenate([silence, audio])
            yield AudioChunk(audio, SAMPLE_RATE, sentence.text, "en")


class KokoroVoices(BuiltinVoices):
    """Kokoro for English and the built-in Mandarin voice for Chinese, routed by script as the built-in voices are.

    Natively cloning in English: the prompt reaches Kokoro, which fits its voice to it. Chinese runs are spoken by
    the Mandarin voice, which the engine matches to the prompt at signal level as on the ``builtin`` backend.
    """

    name = "kokoro"

    @property
    def capabilities(self) -> Capabilities:
        return replace(super().capabilities, native_cloning=True, native_cloning_languages=("en",), batching=False)

    def synthesize(self, request: SpeechRequest, guard: MemoryGuard = run_plainly) -> Iterator[AudioChunk]:
        """The voice is fitted (or taken from the request) once, before the first English run is spoken."""
        english = self.voices["en"]
        spoken = request.prompt is not None and any(run.language == "en" for run in self.runs(request))
        if spoken and isinstance(english, KokoroBackend):
            request = replace(request, fitted=english.voice_of(request))
        yield from super().synthesize(request, guard)


def fit_settings(settings: Settings) -> FitSettings:
    """``--backend-options fit_steps=N,fit_start=PACK``: a shorter fit (tests, a slow CPU) or one starting pack."""
    steps = int(settings.backend_option("fit_steps", str(FitSettings.steps)))
    if steps < 1:
        raise InvalidSettingError("fit_steps must be at least 1.")
    start = settings.backend_option("fit_start")
    check_every = min(FitSettings.check_every, steps)
    return FitSettings(steps=steps, check_every=check_every, start_voices=(start,) if start else ())


def create(settings: Settings) -> KokoroVoices:
    """Kokoro (English, fitted to each prompt) with the built-in Mandarin voice for Chinese."""
    return KokoroVoices(with_mandarin(KokoroBackend(fit_settings(settings))))
