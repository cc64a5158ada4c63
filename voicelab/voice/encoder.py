"""GE2E speaker encoder (Resemblyzer's pretrained weights) in our own PyTorch.

The weights file ships inside the installed ``resemblyzer`` package; the package itself is never imported
(its librosa/webrtcvad dependencies are not installed). Preprocessing follows Resemblyzer: 16 kHz audio,
volume raised to -30 dBFS, long silences removed, a 40-channel power mel spectrogram (25 ms Hann window,
10 ms hop, librosa's Slaney mel scale), partial utterances of 160 frames every 77 frames (about 50 %
overlap), a 3-layer LSTM of 256, linear + ReLU, L2 norm; the utterance embedding is the normalised mean.
"""

from __future__ import annotations

import importlib.util
import logging
import math
from pathlib import Path

import numpy as np
import torch
from scipy.ndimage import binary_dilation
from torch import nn
from torch.nn import functional as F

from voicelab.backends.shape_graphs import ShapeGraphs
from voicelab.errors import BackendLoadError
from voicelab.voice.analysis import active_frames, frame_levels_db
from voicelab.voice.shapes import ladder, on_ladder

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
N_FFT = 400  # 25 ms
HOP = 160  # 10 ms
N_MELS = 40
PARTIAL_FRAMES = 160  # 1.6 s
PARTIAL_RATE = 1.3  # partials per second -> a step of 77 frames
MIN_COVERAGE = 0.75
NORM_TARGET_DBFS = -30.0
VAD_WINDOW_S = 0.030
VAD_AVERAGE_WIDTH = 8
VAD_MAX_SILENCE = 6
# On a GPU spectrogram frames and LSTM rows are rounded up onto ladders of these (``voice.shapes``): the plans recur
# and can be made ahead (``warm_shapes``).
FRAME_STEP = 64
PARTIAL_STEP = 8
_TRAINING_ONLY_KEYS = ("similarity_weight", "similarity_bias")
GRAPH_STAGE = "GE2E encoder"
GRAPH_BYTES = 256 << 20  # the LSTM's graph pool: its activations for 96 partials are ~50 MiB


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above (librosa's default, htk=False)."""
    hz = np.asarray(hz, dtype=np.float64)
    f_sp, min_log_hz, logstep = 200.0 / 3, 1000.0, math.log(6.4) / 27.0
    mel = hz / f_sp
    log_part = min_log_hz / f_sp + np.log(np.maximum(hz, 1e-10) / min_log_hz) / logstep
    return np.where(hz >= min_log_hz, log_part, mel)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    f_sp, min_log_hz, logstep = 200.0 / 3, 1000.0, math.log(6.4) / 27.0
    min_log_mel = min_log_hz / f_sp
    return np.where(mel >= min_log_mel, min_log_hz * np.exp(logstep * (mel - min_log_mel)), f_sp * mel)


def mel_filterbank(sr: int, n_fft: int, n_mels: int, f_max: float | None = None) -> np.ndarray:
    """Triangular Slaney-normalised mel filters, shape (n_mels, 1 + n_fft // 2), as librosa.filters.mel (from 0 Hz
    to ``f_max``, by default half the rate)."""
    fft_freqs = np.linspace(0.0, sr / 2.0, 1 + n_fft // 2)
    top = sr / 2.0 if f_max is None else f_max
    mel_points = _mel_to_hz(np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(top)), n_mels + 2))
    widths = np.diff(mel_points)
    ramps = mel_points[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_points[2:] - mel_points[:-2]))[:, None]
    return weights.astype(np.float32)


def trim_long_silences(wav: np.ndarray) -> np.ndarray:
    """Drop silences longer than ~0.2 s, as Resemblyzer does (energy VAD in place of webrtcvad)."""
    window = int(VAD_WINDOW_S * SAMPLE_RATE)
    wav = wav[: len(wav) - len(wav) % window]
    if len(wav) == 0:
        return wav
    levels = frame_levels_db(wav, SAMPLE_RATE, hop_s=VAD_WINDOW_S, win_s=VAD_WINDOW_S)[: len(wav) // window]
    flags = active_frames(levels, dynamic_range_db=35.0).astype(np.float64)
    kernel = np.ones(VAD_AVERAGE_WIDTH) / VAD_AVERAGE_WIDTH
    smoothed = np.convolve(np.pad(flags, ((VAD_AVERAGE_WIDTH - 1) // 2, VAD_AVERAGE_WIDTH // 2)), kernel, "valid")
    mask = binary_dilation(np.round(smoothed).astype(bool), np.ones(VAD_MAX_SILENCE + 1))
    trimmed = wav[np.repeat(mask, window)]
    return trimmed if len(trimmed) >= SAMPLE_RATE // 2 else wav


def normalize_volume(wav: np.ndarray, target_dbfs: float = NORM_TARGET_DBFS) -> np.ndarray:
    """Raise (never lower) the RMS level to ``target_dbfs``."""
    rms = float(np.sqrt(np.mean(np.square(wav, dtype=np.float64)))) if len(wav) else 0.0
    if rms <= 0.0:
        return wav
    change_db = target_dbfs - 20.0 * math.log10(rms)
    return wav * np.float32(10 ** (change_db / 20)) if change_db > 0 else wav


def partial_slices(n_samples: int) -> list[slice]:
    """Mel-frame ranges of the partial utterances covering ``n_samples`` (Resemblyzer's rule)."""
    n_frames = math.ceil((n_samples + 1) / HOP)
    step = round(SAMPLE_RATE / PARTIAL_RATE / HOP)
    count = max(1, n_frames - PARTIAL_FRAMES + step + 1)
    slices = [slice(i, i + PARTIAL_FRAMES) for i in range(0, count, step)]
    last = slices[-1]
    coverage = (n_samples - last.start * HOP) / (PARTIAL_FRAMES * HOP)
    if coverage < MIN_COVERAGE and len(slices) > 1:
        slices = slices[:-1]
    return slices


def _prepared(samples: np.ndarray) -> tuple[np.ndarray, list[slice]]:
    """Resemblyzer's preparation on the host: volume raised, long silences dropped, zeros to the last partial's
    end; with the partials' frame ranges."""
    wav = trim_long_silences(normalize_volume(samples))
    if len(wav) == 0:
        wav = np.zeros(HOP, dtype=np.float32)
    slices = partial_slices(len(wav))
    return np.pad(wav, (0, max(0, slices[-1].stop * HOP - len(wav)))), slices


def weights_path() -> Path:
    """``pretrained.pt`` inside the installed resemblyzer package, found without importing it."""
    spec = importlib.util.find_spec("resemblyzer")
    if spec is None or not spec.submodule_search_locations:
        raise BackendLoadError("The speaker encoder weights are missing: the 'resemblyzer' package is not installed.")
    path = Path(next(iter(spec.submodule_search_locations))) / "pretrained.pt"
    if not path.is_file():
        raise BackendLoadError(f"The speaker encoder weights are missing: {path} does not exist.")
    return path


class GE2E(nn.Module):
    """LSTM speaker encoder: (batch, frames, 40) mel power -> (batch, 256) unit-norm embeddings."""

    def __init__(self, n_mels: int = N_MELS, hidden: int = 256, layers: int = 3, embedding: int = 256) -> None:
        super().__init__()
        self.lstm = nn.LSTM(n_mels, hidden, layers, batch_first=True)
        self.linear = nn.Linear(hidden, embedding)

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        _, (hidden, _) = self.lstm(mels)
        raw = torch.relu(self.linear(hidden[-1]))
        norm: torch.Tensor = torch.linalg.vector_norm(raw, dim=1, keepdim=True)
        return raw / norm.clamp_min(1e-12)


def _load_state(path: Path) -> dict[str, torch.Tensor]:
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    state = dict(checkpoint["model_state"])
    for key in _TRAINING_ONLY_KEYS:
        state.pop(key, None)
    return state


class SpeakerEncoder:
    """Speaker embeddings on ``device``; one instance per worker, no global state."""

    def __init__(self, device: str | torch.device = "cpu", path: Path | None = None, cuda_graphs: bool = True) -> None:
        self.device = torch.device(device)
        self.model = GE2E()
        state = _load_state(path or weights_path())
        expected = self.model.state_dict()
        missing, extra = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
        if missing or extra:
            raise BackendLoadError(f"The speaker encoder weights do not fit: missing {missing}, unexpected {extra}.")
        for key, value in state.items():
            if value.shape != expected[key].shape:
                raise BackendLoadError(f"The speaker encoder weight {key} has shape {tuple(value.shape)}.")
        self.model.load_state_dict(state, strict=True)
        self.model.to(self.device).eval()
        self._window = torch.hann_window(N_FFT, periodic=True, device=self.device)
        self.rounds_shapes = self.device.type == "cuda"  # for cuDNN's and cuFFT's plans; on a CPU it is only work
        # On a GPU each LSTM batch (rows on ``PARTIAL_STEP``'s ladder) is replayed from a CUDA graph once it has come
        # twice: the LSTM launches per step and layer
        graphed = cuda_graphs and self.rounds_shapes
        self.graphs = ShapeGraphs(GRAPH_STAGE, GRAPH_BYTES, timing_runs=2) if graphed else None
        self._filters = torch.from_numpy(mel_filterbank(SAMPLE_RATE, N_FFT, N_MELS)).to(self.device)

    def mel(self, wav: torch.Tensor) -> torch.Tensor:
        """Power mel spectrogram (frames, 40) of a 16 kHz waveform, centred frames with reflect padding."""
        spec = torch.stft(wav, N_FFT, HOP, N_FFT, self._window, center=True, pad_mode="reflect", return_complex=True)
        return (self._filters @ spec.abs().square()).T

    def embed(self, samples16k: np.ndarray) -> torch.Tensor:
        """Unit-norm 256-d embedding of 16 kHz mono speech, on the encoder's device."""
        return self.embed_batch([samples16k])[0]

    def embed_batch(self, pieces16k: list[np.ndarray]) -> list[torch.Tensor]:
        """One embedding per piece; every piece's partial utterances go through the LSTM as one batch.

        The pieces' spectrograms are one batched STFT; on a GPU both it and the LSTM's batch are rounded up to
        recurring sizes (``FRAME_STEP``, ``PARTIAL_STEP``; ``voice.shapes``). Each piece reads only its own frames and
        rows, so its embedding is the one it has alone."""
        prepared = [_prepared(np.asarray(samples, dtype=np.float32)) for samples in pieces16k]
        if not prepared:
            return []
        with torch.inference_mode():
            mels = self._mels([wav for wav, _ in prepared])
            partials = [mels[row, s] for row, (_, slices) in enumerate(prepared) for s in slices]
            rows = on_ladder(len(partials), PARTIAL_STEP) if self.rounds_shapes else len(partials)
            batch = mels.new_zeros(rows, PARTIAL_FRAMES, N_MELS)
            batch[: len(partials)] = torch.stack(partials)
            embedded = self._embedded(batch)[: len(partials)]
            out = []
            for chunk in torch.split(embedded, [len(slices) for _, slices in prepared]):
                mean = chunk.mean(dim=0)
                out.append(mean / torch.linalg.vector_norm(mean).clamp_min(1e-12))
            return out

    def _embedded(self, batch: torch.Tensor) -> torch.Tensor:
        """``model(batch)``, replayed where its rows have a graph."""
        if self.graphs is not None:
            replayed = self.graphs.replayed((len(batch), PARTIAL_FRAMES), self.model, (batch,), torch.Tensor.clone)
            if replayed is not None:
                return replayed
        out: torch.Tensor = self.model(batch)
        return out

    def warm_shapes(self, limit_samples: int, pieces: int) -> list[tuple[int, ...]]:
        """Every spectrogram batch of ``pieces`` rows up to ``limit_samples`` and every LSTM batch those pieces can
        make, run once on silence, so their cuFFT and cuDNN plans exist before a request's scoring needs them.
        Returns the shapes run: (pieces, frames) and (rows,); on a CPU, where nothing is rounded, none."""
        if not self.rounds_shapes:
            return []
        frames = ladder(FRAME_STEP, limit_samples // HOP + 1)
        rows = ladder(PARTIAL_STEP, pieces * len(partial_slices(limit_samples)))
        with torch.inference_mode():
            for count in frames:
                self._mels([np.zeros((count - 1) * HOP, dtype=np.float32)] * pieces)
            for count in rows:
                self._embedded(torch.zeros(count, PARTIAL_FRAMES, N_MELS, device=self.device))
        return [(pieces, count) for count in frames] + [(count,) for count in rows]

    def _mels(self, waves: list[np.ndarray]) -> torch.Tensor:
        """``mel`` of each wave as one batch (B, frames, 40): each row reflected at its own edges (``mel``'s
        centring), then zero-padded to the batch's width."""
        half = N_FFT // 2
        frames = max(len(wav) for wav in waves) // HOP + 1
        frames = on_ladder(frames, FRAME_STEP) if self.rounds_shapes else frames
        batch = torch.zeros(len(waves), (frames - 1) * HOP + N_FFT)
        for row, wav in enumerate(waves):
            batch[row, : len(wav) + 2 * half] = F.pad(torch.from_numpy(wav)[None], (half, half), mode="reflect")[0]
        spec = torch.stft(batch.to(self.device), N_FFT, HOP, N_FFT, self._window, center=False, return_complex=True)
        return (self._filters @ spec.abs().square()).transpose(1, 2)

    @staticmethod
    def similarity(a: torch.Tensor, b: torch.Tensor) -> float:
        """Cosine similarity of two embeddings (unit norm, so a dot product)."""
        return float(torch.dot(a.flatten().float().cpu(), b.flatten().float().cpu()))
