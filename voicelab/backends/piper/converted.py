"""The compact PyTorch file format for Piper weights (optionally half precision).

Used to take a voice to a machine without the voice package (the ONNX file of a medium voice is 63 MB; the
float16 conversion is half that). Load it like an ``.onnx`` voice: ``PiperBackend("voice.pt")`` with the
voice's config beside it as ``voice.pt.json``. Written by ``python -m voicelab.backends.piper.convert``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from voicelab.errors import BackendLoadError

FORMAT = "voicelab-piper-weights-1"


def write_converted(
    tensors: dict[str, torch.Tensor], convs: dict[str, tuple[int, int]], out_path: Path, dtype: torch.dtype
) -> None:
    """Save state-dict tensors (cast to ``dtype``) and conv (stride, dilation) pairs."""
    payload = {
        "format": FORMAT,
        "tensors": {name: tensor.to(dtype) for name, tensor in tensors.items()},
        "convs": convs,
    }
    torch.save(payload, out_path)


def read_converted(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, tuple[int, int]]]:
    """Tensors (as float32) and conv (stride, dilation) pairs from a converted file."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises pickle, zip and runtime errors for damaged files
        raise BackendLoadError(f"The voice model {path} is not a readable converted voice ({exc}).") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise BackendLoadError(f"The voice model {path} is not a VoiceLab converted Piper voice.")
    tensors = {name: tensor.float() for name, tensor in payload["tensors"].items()}
    return tensors, dict(payload["convs"])
