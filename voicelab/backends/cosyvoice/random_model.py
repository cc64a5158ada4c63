"""Write a CosyVoice2/3 model directory of the real architecture with random weights.

    python -m voicelab.backends.cosyvoice.random_model --version 2|3 --size tiny|full OUT

Needs the optional install (upstream's classes build the modules). The directory holds what upstream's loader
reads: ``cosyvoice{2,3}.yaml``, ``llm.pt``/``flow.pt``/``hift.pt`` (state dicts of the instantiated modules),
``CosyVoice-BlankEN/`` (a Qwen2 of the 0.5B shape; tiny: 2 layers), ``campplus.onnx``, ``speech_tokenizer_v{2,3}.onnx``,
an empty ``spk2info.pt``, and ``voicelab-random.json``, which tells the backend to cap generated speech tokens by
text length (random weights never emit the end token). The audio is noise; memory, latency and code paths are real.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from voicelab.backends.cosyvoice.random_parts import write_campplus, write_qwen, write_speech_tokenizer
from voicelab.backends.cosyvoice.random_yaml import hyperparameters

log = logging.getLogger(__name__)
TOKEN_CAP = 500  # 20 s of speech at 25 tokens/s


def write_model(out: Path, version: int, tiny: bool, device: str = "cpu", seed: int = 0) -> Path:
    """Build every file of a random model directory in ``out`` (created); returns ``out``."""
    import torch
    from hyperpyyaml import load_hyperpyyaml

    from voicelab.backends.cosyvoice.upstream import block_downloads

    block_downloads()
    torch.manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)
    blank = out / "CosyVoice-BlankEN"
    write_qwen(blank, 2 if tiny else 24, device)
    text = hyperparameters(version, tiny)
    (out / f"cosyvoice{version}.yaml").write_text(text)
    configs = load_hyperpyyaml(io.StringIO(text), overrides={"qwen_pretrain_path": str(blank)})
    for name in ("llm", "flow", "hift"):
        module = configs[name].float()
        torch.save(module.state_dict(), out / f"{name}.pt")
        log.info("%s: %.1f M parameters", name, sum(p.numel() for p in module.parameters()) / 1e6)
    del configs
    write_campplus(out / "campplus.onnx", seed)
    write_speech_tokenizer(out / f"speech_tokenizer_v{version}.onnx", seed + 1)
    torch.save({}, out / "spk2info.pt")
    marker = {"version": version, "size": "tiny" if tiny else "full", "token_cap": TOKEN_CAP, "seed": seed}
    (out / "voicelab-random.json").write_text(json.dumps(marker, indent=2))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m voicelab.backends.cosyvoice.random_model", description=__doc__)
    parser.add_argument("--version", type=int, choices=(2, 3), required=True)
    parser.add_argument("--size", choices=("tiny", "full"), default="tiny")
    parser.add_argument("--device", default="cpu", help="where the random Qwen body is initialised (cuda is faster)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--code", default="", help="an upstream checkout to import from (needed for --version 3)")
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.code:
        sys.path.insert(0, str(Path(args.code).resolve()))
    started = time.perf_counter()
    write_model(args.out, args.version, args.size == "tiny", args.device, args.seed)
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    log.info("wrote %s (%.2f GB) in %.1f s", args.out, size / 1e9, time.perf_counter() - started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
