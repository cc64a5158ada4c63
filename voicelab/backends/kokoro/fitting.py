"""Fitting Kokoro's style vector (ref_s, 256-d) to a prompt clip by gradient descent through our PyTorch model.

Objective (never the ECAPA judge): 1 - GE2E cosine to the prompt (``ge2e_grad``), plus the squared log ratio
of the model's own predicted F0 (voiced frames) to the prompt's median F0, plus a pull toward the voice packs'
span (the change measured in the packs' per-dimension standard deviations). Durations are held at those of the
starting voice while it fits. Start: the pack whose voice is nearest the prompt in GE2E. Stop: the best step by
a held-out sentence the fit never speaks, checked every few steps, with patience. Then the pitch: the decoder does
not render the predicted F0 exactly (fitted voices came out 5-15 % above their prompts), so the held-out sentence
is spoken, its median F0 measured (Praat, the ruler the prompt's F0 is measured by) and the F0 curve's scale set
to close the gap.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch
from scipy.signal import resample_poly

from voicelab.backends.kokoro.config import SAMPLE_RATE
from voicelab.backends.kokoro.ge2e_grad import ge2e_embedding, resample_filter, to_16k
from voicelab.backends.kokoro.model import Alignment, KokoroModel
from voicelab.backends.kokoro.voices import VoicePacks
from voicelab.voice.analysis import f0_median_hz
from voicelab.voice.encoder import SpeakerEncoder
from voicelab.voice.fitted import F0_SCALES, FittedStyle
from voicelab.voice.prompt import PromptAudio

logger = logging.getLogger(__name__)
FIT_TEXT = "The boy was there when the sun rose, and she had your dark suit in greasy wash water."
WINDOW_FRAMES = 96  # each step decodes 2.4 s of the fit sentence (a window moving along it): GE2E needs 1.6 s
HELD_OUT_TEXT = "Glue the sheet to the dark blue background, then open the window."
PITCH_ROUNDS = 2  # speak, measure, rescale; the second round corrects what the first scale did not move
Progress = Callable[[int, int], None]


class HasIds(Protocol):
    @property
    def ids(self) -> tuple[int, ...]: ...


class Phonemizer(Protocol):
    """What the fit needs of a frontend: sentences with token ids (``KokoroFrontend`` is one)."""

    def sentences(self, text: str) -> Sequence[HasIds]: ...


@dataclass(frozen=True)
class FitSettings:
    """steps: most gradient steps; check_every / patience: held-out checks and how many may fail to improve;
    learning_rate: Adam's, in pack standard deviations; f0_weight / span_weight: the objective's terms;
    noise: the harmonic source's random phase and noise when speaking (off: as the reference graph);
    start_voices: the packs tried as the start (empty: all of them); pitch: measure the fitted voice's F0 on the
    held-out sentence and scale the F0 curve to the prompt's (off: the curve as the model predicts it)."""

    steps: int = 60
    check_every: int = 10
    patience: int = 2
    learning_rate: float = 0.08
    f0_weight: float = 10.0
    span_weight: float = 0.01
    noise: bool = False
    start_voices: tuple[str, ...] = ()
    pitch: bool = True


@dataclass(frozen=True)
class Checked:
    """A style checked on the held-out sentence: GE2E cosine to the prompt, the step it was reached at (0: the start
    pack) and the audio [N] it spoke there, at the predicted pitch: the pitch scale's first measurement, so the style
    chosen is not made to say the sentence again."""

    score: float
    style: torch.Tensor = field(repr=False)
    step: int
    audio: torch.Tensor = field(repr=False)


@dataclass(frozen=True)
class FittedVoice:
    """The fitted ref_s [256] (CPU), the pack it started from, GE2E on the held-out sentence before and after,
    the steps taken, the seconds the fit took, and the F0 curve's scale that puts it at the prompt's pitch."""

    style: torch.Tensor = field(repr=False)
    start_voice: str
    ge2e_start: float
    ge2e_fitted: float
    steps: int
    seconds: float
    f0_scale: float = 1.0

    def profile(self, backend: str, prompt_sha256: str) -> FittedStyle:
        """As the typed profile that leaves the backend: a plain vector, torch-free, kept with a saved voice."""
        vector = tuple(float(v) for v in self.style.detach().cpu().reshape(-1).tolist())
        return FittedStyle(
            backend,
            prompt_sha256,
            vector,
            self.start_voice,
            self.ge2e_start,
            self.ge2e_fitted,
            self.steps,
            self.seconds,
            self.f0_scale,
        )


class StyleFitter:
    """Fits one prompt at a time on the model's device; owns a GE2E encoder there."""

    def __init__(
        self, model: KokoroModel, frontend: Phonemizer, packs: VoicePacks, device: str, settings: FitSettings
    ) -> None:
        self.model, self.frontend, self.packs, self.settings = model, frontend, packs, settings
        self.device = torch.device(device)
        self.encoder = SpeakerEncoder(self.device)
        self.encoder.model.requires_grad_(False)
        self.kernel = resample_filter(self.device)
        _, std = packs.spread()
        self.std = torch.from_numpy(std).to(self.device)
        self.pack_speech: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # each start pack's held-out speech

    def tokens(self, text: str) -> torch.Tensor:
        ids = [i for sentence in self.frontend.sentences(text) for i in sentence.ids]
        return torch.tensor([[0, *ids[:510], 0]], device=self.device)

    def spoken(self, tokens: torch.Tensor, style: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The voice saying ``tokens`` (durations its own): the audio [N] and its GE2E embedding."""
        with torch.inference_mode():
            audio = self.model(tokens, style[None]).audio
            return audio, ge2e_embedding(self.encoder, to_16k(audio, self.kernel))

    def pack_scores(
        self, starts: dict[str, torch.Tensor], held_tokens: torch.Tensor, target: torch.Tensor
    ) -> dict[str, float]:
        """Each start pack's GE2E cosine to the prompt on the held-out sentence. What a pack says does not depend
        on the prompt, so its speech and embedding are made once per fitter (five syntheses, ~6 s of a fit on a 2-core
        CPU)."""
        with torch.inference_mode():
            for name, style in starts.items():
                if name not in self.pack_speech:
                    self.pack_speech[name] = self.spoken(held_tokens, style)
            return {name: float(self.pack_speech[name][1] @ target) for name in starts}

    def fit(self, prompt: PromptAudio, progress: Progress | None = None, f0_hz: float | None = None) -> FittedVoice:
        """The fitted voice for ``prompt`` (``f0_hz``: its median F0 when already measured)."""
        started = time.perf_counter()
        samples16k = (
            resample_poly(prompt.samples, 16000, prompt.sample_rate) if prompt.sample_rate != 16000 else prompt.samples
        )
        target = self.encoder.embed(np.asarray(samples16k, np.float32)).clone()  # out of inference mode, for autograd
        f0_target = float(f0_hz) if f0_hz is not None else f0_median_hz(prompt.samples, prompt.sample_rate)
        fit_tokens = self.tokens(prompt.transcript or FIT_TEXT)
        held_tokens = self.tokens(HELD_OUT_TEXT)
        starts = {
            name: torch.from_numpy(self.packs.style(name, held_tokens.shape[1] - 2)).to(self.device)
            for name in self.settings.start_voices or tuple(self.packs.packs)
        }
        scores = self.pack_scores(starts, held_tokens, target)
        start_voice = max(scores, key=lambda name: scores[name])
        start = Checked(scores[start_voice], starts[start_voice], 0, self.pack_speech[start_voice][0])
        best = self.descend(fit_tokens, held_tokens, target, f0_target, start, progress)
        scale = self.pitch_scale(held_tokens, best, f0_target) if self.settings.pitch else 1.0
        seconds = time.perf_counter() - started
        logger.info(
            "fitted voice from %s: GE2E %.3f -> %.3f in %d steps, F0 x%.3f, %.1f s",
            start_voice,
            scores[start_voice],
            best.score,
            best.step,
            scale,
            seconds,
        )
        style = best.style.detach().cpu()
        return FittedVoice(style, start_voice, scores[start_voice], best.score, best.step, seconds, scale)

    def pitch_scale(self, tokens: torch.Tensor, checked: Checked, wanted_hz: float) -> float:
        """The F0 curve's scale at which the checked style speaks the held-out sentence (``tokens``) at the prompt's
        median F0 (``wanted_hz``, measured the same way); 1.0 where either has no voiced frames. The first round
        measures the audio the check spoke (scale 1.0: the same sentence, style and pitch), not a new synthesis."""
        if not wanted_hz > 0:
            return 1.0
        scale, audio = 1.0, checked.audio
        for round_ in range(PITCH_ROUNDS):
            if round_:
                with torch.inference_mode():
                    audio = self.model(tokens, checked.style[None], f0_scale=scale).audio
            spoken = f0_median_hz(audio.float().cpu().numpy(), SAMPLE_RATE)
            if not spoken > 0:
                return 1.0
            scale = min(max(scale * wanted_hz / spoken, F0_SCALES[0]), F0_SCALES[1])
        return scale

    def descend(
        self,
        fit_tokens: torch.Tensor,
        held_tokens: torch.Tensor,
        target: torch.Tensor,
        f0_target: float,
        best: Checked,
        progress: Progress | None,
    ) -> Checked:
        """Adam on the change from ``best``'s style (the start; in pack standard deviations); returns the best style
        checked on the held-out sentence (the start included)."""
        settings = self.settings
        start = best.style
        z = torch.zeros_like(start, requires_grad=True)
        optimiser = torch.optim.Adam([z], lr=settings.learning_rate)
        with torch.no_grad():
            alignment = self.model.align(fit_tokens, start[None])
        log_f0_target = float(np.log(max(f0_target, 50.0)))
        misses = 0
        self.encoder.model.train()  # cuDNN's LSTM backward needs training mode (GE2E has no dropout)
        try:
            for step in range(1, settings.steps + 1):
                style = start + z * self.std
                window = self.window(alignment, step)
                loss = self.objective(window, style, target, log_f0_target) + settings.span_weight * z.pow(2).mean()
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                logger.info("fitting voice: step %d of %d", step, settings.steps)
                if progress is not None:
                    progress(step, settings.steps)
                if step % settings.check_every == 0:
                    candidate = (start + z * self.std).detach()
                    audio, embedding = self.spoken(held_tokens, candidate)
                    score = float(embedding @ target)
                    if score > best.score:
                        best, misses = Checked(score, candidate, step, audio), 0
                    else:
                        misses += 1
                        if misses >= settings.patience:
                            break
        finally:
            self.encoder.model.eval()
        return best

    @staticmethod
    def window(alignment: Alignment, step: int) -> Alignment:
        """A WINDOW_FRAMES slice of the aligned features, moving along the sentence from step to step."""
        total = alignment.asr.shape[2]
        if total <= WINDOW_FRAMES:
            return alignment
        start = (step * 37) % (total - WINDOW_FRAMES + 1)
        stop = start + WINDOW_FRAMES
        return Alignment(
            alignment.frames, alignment.prosody_features[:, :, start:stop], alignment.asr[:, :, start:stop]
        )

    def objective(self, alignment: Alignment, style: torch.Tensor, target: torch.Tensor, log_f0: float) -> torch.Tensor:
        """1 - GE2E cosine + f0_weight x (log F0 ratio)^2 for the voice speaking the fit sentence."""
        prosody = style[None, self.model.dims.style :]
        f0, energy = self.model.predictor.curves(alignment.prosody_features, prosody)
        audio = self.model.decoder(alignment.asr, f0, energy, style[None, : self.model.dims.style])[0]
        embedding = ge2e_embedding(self.encoder, to_16k(audio, self.kernel))
        voiced = (f0 > 50).float().detach()
        log_f0_out = (torch.log(f0.clamp_min(1.0)) * voiced).sum() / voiced.sum().clamp_min(1.0)
        return (1 - embedding @ target) + self.settings.f0_weight * (log_f0_out - log_f0).pow(2)
