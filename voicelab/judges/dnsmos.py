"""``DnsmosJudge``: how clean a voice sounds, by Microsoft's DNSMOS P.835, a judge nothing fits or matches against.

Similarity (ECAPA) and intelligibility (Whisper) say nothing of artefacts: a voice can be close to the prompt and
still buzz or hiss. DNSMOS P.835 (Reddy et al., ICASSP 2022, from the DNS Challenge) predicts the three ITU-T P.835
opinion scores from raw 16 kHz audio, no reference needed: SIG (the speech itself), BAK (the background) and OVRL
(overall), each on the 1-5 scale. Its ONNX file ships inside the PyPI package ``speechmos==0.0.1.1`` (MIT,
Microsoft), found with ``importlib`` and read by path; the package's own code is never imported (it needs librosa
and pandas). Nothing is downloaded.

Windowing (ours, after the DNSMOS reference): audio at any rate is resampled to 16 kHz (scipy's ``resample_poly``)
and clipped to [-1, 1]; a clip shorter than 9.01 s is repeated and cut to exactly one window; longer clips give
windows of 9.01 s (144,160 samples, the model's input) starting every 1 s while they fit in the clip; each window's
raw scores go through the reference's non-personalised polynomial mapping, and the clip's figure is the mean over
its windows.
"""

from __future__ import annotations

import importlib.util
import itertools
import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.signal import resample_poly

from voicelab.errors import BackendLoadError

log = logging.getLogger(__name__)

JUDGE_RATE = 16000
WINDOW = 144160  # 9.01 s at 16 kHz: the model's fixed input length
HOP = JUDGE_RATE  # one window per second of audio
MAX_WINDOWS = 16  # windows per forward pass (each 144,160 floats)
PACKAGE = "speechmos"
MODEL_FILE = "dnsmos_models/sig_bak_ovr.onnx"
INSTALL = "pip install --no-deps speechmos==0.0.1.1"
# The non-personalised mapping from the model's raw outputs to P.835 scores (DNSMOS reference, highest power first).
MAPPING = {
    "sig": (-0.08397278, 1.22083953, 0.0052439),
    "bak": (-0.13166888, 1.60915514, -0.39604546),
    "ovrl": (-0.06766283, 1.11546468, 0.04602535),
}


@dataclass(frozen=True)
class DnsmosScores:
    """P.835 opinion scores of one clip, each 1 (bad) to 5 (excellent): speech, background, overall."""

    sig: float
    bak: float
    ovrl: float


def find_model() -> Path:
    """``speechmos/dnsmos_models/sig_bak_ovr.onnx`` inside the installed package, located without importing it."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise BackendLoadError(f"The DNSMOS quality judge needs its model: install it with `{INSTALL}`.")
    path = Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE
    if not path.is_file():
        raise BackendLoadError(f"The DNSMOS model is missing ({path}): reinstall it with `{INSTALL}`.")
    return path


def windows(clip: np.ndarray, sample_rate: int) -> np.ndarray:
    """The clip at 16 kHz as rows of 9.01 s windows, 1 s apart (short clips repeated to fill one window)."""
    wave = np.asarray(clip, dtype=np.float64)
    if wave.ndim != 1 or wave.size == 0:
        raise ValueError(f"the DNSMOS judge takes one non-empty mono clip (a 1-D array), not shape {wave.shape}")
    if not np.isfinite(wave).all():
        raise ValueError("the DNSMOS judge was given a clip with NaN or infinite samples")
    if sample_rate != JUDGE_RATE:
        g = math.gcd(int(sample_rate), JUDGE_RATE)
        wave = resample_poly(wave, JUDGE_RATE // g, int(sample_rate) // g)
    wave = np.clip(wave, -1.0, 1.0).astype(np.float32)
    if len(wave) < WINDOW:
        wave = np.tile(wave, -(-WINDOW // len(wave)))[:WINDOW]
    starts = range(0, len(wave) - WINDOW + 1, HOP)
    return np.stack([wave[s : s + WINDOW] for s in starts])


def mapped(raw: np.ndarray) -> np.ndarray:
    """Raw (sig, bak, ovrl) rows through the reference's polynomials, column by column."""
    return np.stack([np.polyval(MAPPING[name], raw[:, i]) for i, name in enumerate(("sig", "bak", "ovrl"))], axis=1)


class DnsmosJudge:
    """DNSMOS P.835 on a CPU (onnxruntime); the model loads on first use (or ``load()``), thread-safe."""

    def __init__(self, threads: int = 1, model_path: Path | None = None) -> None:
        self.threads = threads
        self._model_path = model_path
        self._session: Any = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def load(self) -> None:
        self._ready()

    def unload(self) -> None:
        with self._lock:
            self._session = None

    def _ready(self) -> Any:
        with self._lock:
            if self._session is None:
                import onnxruntime

                path = self._model_path or find_model()
                options = onnxruntime.SessionOptions()
                options.intra_op_num_threads = max(1, self.threads)
                options.inter_op_num_threads = 1
                try:
                    self._session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                except Exception as err:  # onnxruntime raises its own untyped errors for a broken file
                    raise BackendLoadError(f"The DNSMOS model could not be read ({path}: {err}).") from err
                log.info("DNSMOS judge loaded from %s (%d threads)", path, self.threads)
            return self._session

    def score(self, clip: np.ndarray, sample_rate: int) -> DnsmosScores:
        """SIG, BAK and OVRL of one clip: the mean over its windows."""
        return self.score_many([clip], sample_rate)[0]

    def score_many(self, clips: Sequence[np.ndarray], sample_rate: int) -> list[DnsmosScores]:
        """Each clip's scores; the windows of all clips go through the model together, in passes of ``MAX_WINDOWS``."""
        session = self._ready()
        per_clip = [windows(clip, sample_rate) for clip in clips]
        batch = np.concatenate(per_clip) if per_clip else np.zeros((0, WINDOW), np.float32)
        name = session.get_inputs()[0].name
        raw = [session.run(None, {name: batch[i : i + MAX_WINDOWS]})[0] for i in range(0, len(batch), MAX_WINDOWS)]
        scores = mapped(np.concatenate(raw).astype(np.float64)) if raw else np.zeros((0, 3))
        bounds = np.cumsum([0, *(len(w) for w in per_clip)])
        means = [scores[a:b].mean(axis=0) for a, b in itertools.pairwise(bounds)]
        return [DnsmosScores(float(m[0]), float(m[1]), float(m[2])) for m in means]
