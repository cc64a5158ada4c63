"""Piper weights converted from ``.onnx`` to a compact PyTorch file (optionally half precision).

Used to take a voice to a machine without the voice package (the ONNX file of a medium voice is 63 MB; the
float16 conversion is half that). Load it like an ``.onnx`` voice: ``PiperBackend("voice.pt")`` with the
voice's config beside it as ``voice.pt.json``.

    python -m voicelab.backends.piper.converted in.onnx out.pt [--dtype float16]
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch

from voicelab.errors import BackendLoadError

FORMAT = "voicelab-piper-weights-1"


def save_converted(onnx_path: str | Path, out_path: str | Path, dtype: torch.dtype = torch.float16) -> Path:
    from voicelab.backends.piper.weights import read_voice_weights

    weights = read_voice_weights(onnx_path)
    payload = {
        "format": FORMAT,
        "tensors": {name: tensor.to(dtype) for name, tensor in weights.tensors.items()},
        "convs": {name: (spec.stride, spec.dilation) for name, spec in weights.convs.items()},
    }
    out = Path(out_path)
    torch.save(payload, out)
    shutil.copyfile(f"{onnx_path}.json", f"{out}.json")
    return out


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("onnx", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--dtype", choices=("float16", "float32"), default="float16")
    args = parser.parse_args()
    out = save_converted(args.onnx, args.out, getattr(torch, args.dtype))
    print(f"{out} ({out.stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
