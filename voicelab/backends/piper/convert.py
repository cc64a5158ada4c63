"""Convert a Piper ``.onnx`` voice to VoiceLab's compact PyTorch file.

python -m voicelab.backends.piper.convert in.onnx out.pt [--dtype float16]
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch

from voicelab.backends.piper.converted import write_converted
from voicelab.backends.piper.weights import read_voice_weights


def save_converted(onnx_path: str | Path, out_path: str | Path, dtype: torch.dtype = torch.float16) -> Path:
    """Write ``out_path`` (and its ``.json`` config copied from beside the ``.onnx``)."""
    weights = read_voice_weights(onnx_path)
    out = Path(out_path)
    convs = {name: (spec.stride, spec.dilation) for name, spec in weights.convs.items()}
    write_converted(weights.tensors, convs, out, dtype)
    shutil.copyfile(f"{onnx_path}.json", f"{out}.json")
    return out


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
