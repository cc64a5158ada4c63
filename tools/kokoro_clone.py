"""Kokoro's fitted voices judged beside the built-in voice: bundle for a GPU box, then judge what came back.

``bundle --prompts DIR --out DIR``: what ``tools.kokoro_device`` needs on a machine without the voice packages
or espeak: ``bundle.json`` (prompts' median F0 and transcripts, every text as Kokoro token ids), ``prompts.npz``,
``site-a`` and ``site-b`` (the model parts gzipped, unpacked by ``kokoro_device`` where they arrive; the voice packs
and GE2E weights in float16, laid out as the packages are), split in two so each half fits one transfer
(under ``HALF_LIMIT``); ``site-b`` also holds an empty ``parselmouth`` module (Praat is not needed there).

``judge --prompts DIR --results DIR``: for every prompt, the evaluation texts spoken by the starting pack (base)
and the fitted voice, judged here: ECAPA (``judges.ecapa``, never read by the fit) and GE2E similarity to the
prompt, Whisper's WER, median F0; beside them Piper's unmatched voice on the same texts.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from voicelab.backends.kokoro.fitting import FIT_TEXT, HELD_OUT_TEXT
from voicelab.backends.kokoro.weights import MODEL_PARTS, VOICE_PACKAGE, package_dir
from voicelab.eval.clone import EVAL_TEXTS
from voicelab.voice.encoder import weights_path

log = logging.getLogger(__name__)
EVAL_COUNT = 8  # Harvard sentence pairs spoken per prompt and voice
HALF_LIMIT = 45 * 2**20  # one carried half: the device call's 64 MiB less the working tree and some room
PARITY_TEXTS = (
    "The birch canoe slid on the smooth planks.",
    "It's easy to tell the depth of a well, she said quietly.",
    "Four hours of steady work faced us, and a large size in stockings is hard to sell.",
)


def bundle(prompts: Path, out: Path) -> None:
    from voicelab.backends.kokoro.frontend import KokoroFrontend
    from voicelab.voice.analysis import f0_median_hz
    from voicelab.voice.intake import load_prompt

    frontend = KokoroFrontend()

    def ids(text: str) -> list[list[int]]:
        return [list(s.ids) for s in frontend.sentences(text)]

    entries: dict[str, Any] = {}
    samples: dict[str, np.ndarray] = {}
    texts = {text: ids(text) for text in (FIT_TEXT, HELD_OUT_TEXT)}
    for wav in sorted(prompts.glob("*.wav")):
        txt = wav.with_suffix(".txt")
        transcript = txt.read_text(encoding="utf-8").strip() if txt.is_file() else ""
        prompt = load_prompt(wav, transcript)
        english = transcript if transcript and transcript.isascii() else ""  # the fit speaks English only
        samples[wav.stem] = prompt.samples
        entries[wav.stem] = {
            "rate": prompt.sample_rate, "transcript": english, "f0_hz": f0_median_hz(prompt.samples, prompt.sample_rate)
        }  # fmt: skip
        if english:
            texts[english] = ids(english)
    evals = {f"eval_{i}": ids(t) for i, t in enumerate(EVAL_TEXTS["en"][:EVAL_COUNT])}
    extra = [ids(t) for t in EVAL_TEXTS["en"][EVAL_COUNT:]]
    parity = [ids(t)[0] for t in PARITY_TEXTS]
    out.mkdir(parents=True, exist_ok=True)
    payload = {"prompts": entries, "texts": texts, "eval": evals, "extra": extra, "parity": parity}
    (out / "bundle.json").write_text(json.dumps(payload))
    np.savez(out / "prompts.npz", **samples)  # type: ignore[arg-type]
    lay_out_site(out)
    halves = {"site-a + bundle.json + prompts.npz": folder_bytes(out) - folder_bytes(out / "site-b")}
    halves["site-b"] = folder_bytes(out / "site-b")
    for half, size in halves.items():
        log.warning("%s: %.1f MiB", half, size / 2**20)
        if size >= HALF_LIMIT:
            raise SystemExit(f"{half} is {size / 2**20:.1f} MiB, over the {HALF_LIMIT / 2**20:.0f} MiB of one transfer")


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def lay_out_site(out: Path) -> None:
    """The packages' files as the packages lay them out (the model parts gzipped): parts 1-2 and the voice packs
    in site-a, parts 3-4, GE2E and the Praat stand-in in site-b (both made afresh)."""
    for folder_name in ("site-a", "site-b"):
        shutil.rmtree(out / folder_name, ignore_errors=True)
    for index, name in enumerate(MODEL_PARTS):
        folder = out / ("site-a" if index < 2 else "site-b") / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text("")
        (folder / "part.bin").unlink(missing_ok=True)  # unpacked again from the gzip where it arrives
        with gzip.open(folder / "part.bin.gz", "wb", compresslevel=6) as packed:
            packed.write((package_dir(name) / "part.bin").read_bytes())
    site = out / "site-a"
    data = site / VOICE_PACKAGE / "data"
    data.mkdir(parents=True, exist_ok=True)
    (site / VOICE_PACKAGE / "__init__.py").write_text("")
    for name in ("model.sha256", "vocab.json", "voices_ja.npz"):
        shutil.copyfile(package_dir(VOICE_PACKAGE) / "data" / name, data / name)
    site = out / "site-b"
    (site / "resemblyzer").mkdir(exist_ok=True)
    (site / "resemblyzer" / "__init__.py").write_text("")
    checkpoint = torch.load(weights_path(), map_location="cpu", weights_only=True)
    half = {k: v.half() if v.is_floating_point() else v for k, v in checkpoint["model_state"].items()}
    torch.save({"model_state": half}, site / "resemblyzer" / "pretrained.pt")
    (site / "parselmouth.py").write_text('"""Empty: Praat is not used on the GPU box (F0 comes measured)."""\n')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("bundle")
    make.add_argument("--prompts", type=Path, required=True)
    make.add_argument("--out", type=Path, required=True)
    judge = sub.add_parser("judge")
    judge.add_argument("--prompts", type=Path, required=True)
    judge.add_argument("--results", type=Path, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    if args.command == "bundle":
        bundle(args.prompts, args.out)
    else:
        from voicelab.eval.kokoro import judge_results

        print(judge_results(args.prompts, args.results, EVAL_TEXTS["en"]))


if __name__ == "__main__":
    main()
