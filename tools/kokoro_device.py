"""Kokoro on a GPU box without the voice packages or espeak: parity, speed, memory, and voices fitted to prompts.

``python -m tools.kokoro_clone bundle`` (on a machine with the packages) writes what this needs: the prompts as
arrays with their median F0, every text as Kokoro token ids, the voice packs, and the model parts laid out as
the packages are (``--site``, put on ``PYTHONPATH``). This script then, on ``--device``:

1. parity with onnxruntime (CPU) on three sentences x two packs, stage by stage (``kokoro.parity``);
2. real-time factor of plain synthesis (ours on the device, onnxruntime on the CPU), peak memory, and a soak of
   ``--soak`` requests of varied lengths (allocated after each, reserved at the end);
3. for every prompt: the fit (``StyleFitter`` with the backend's settings but ``--steps``: seconds, steps, GE2E
   before and after), the time of a request with the kept voice (its ``FittedStyle``, as a saved voice carries
   it: vector to the device, then the sentence) against one with a pack (median of ``--repeats``), and the
   evaluation texts spoken by the starting pack (base), the fitted voice at the prompt's pitch (fitted) and the
   fitted voice with the F0 curve as the model predicts it (unpitched) (int16 at 24 kHz, one ``.npz`` per prompt,
   judged later on the CPU by ``python -m voicelab eval clone --backend kokoro --results DIR``).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from voicelab.backends.kokoro.fitting import FitSettings, StyleFitter
from voicelab.backends.kokoro.model import KokoroModel
from voicelab.backends.kokoro.parity import compare, reference_session
from voicelab.backends.kokoro.voices import DEFAULT_VOICE, VoicePacks, read_voice_packs
from voicelab.backends.kokoro.weights import load_kokoro_model, model_bytes
from voicelab.voice.fitted import FittedStyle
from voicelab.voice.prompt import PromptAudio

T = TypeVar("T")


@dataclass(frozen=True)
class Ids:
    ids: tuple[int, ...]


class BundledTexts:
    """The fitter's phonemizer from the bundle: each text's sentences as token ids, phonemised beforehand."""

    def __init__(self, texts: dict[str, list[list[int]]]) -> None:
        self.texts = texts

    def sentences(self, text: str) -> list[Ids]:
        return [Ids(tuple(ids)) for ids in self.texts[text]]


def unpack_site(bundle: Path) -> None:
    """The model parts arrive gzipped (``kokoro_clone bundle``): unpacked beside themselves, once."""
    for packed in sorted(bundle.glob("site-*/*/part.bin.gz")):
        target = packed.with_suffix("")
        if not target.is_file() or target.stat().st_mtime < packed.stat().st_mtime:
            with gzip.open(packed, "rb") as source:
                target.write_bytes(source.read())


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def speak(
    model: torch.nn.Module,
    sentences: list[list[int]],
    style: torch.Tensor | None,
    packs: VoicePacks,
    device: str,
    f0_scale: float = 1.0,
) -> np.ndarray:
    """A text's sentences with ``style`` (or the default pack's row per length), joined by 0.2 s of silence."""
    pieces: list[np.ndarray] = []
    for ids in sentences:
        ref = style[None] if style is not None else torch.from_numpy(packs.style(DEFAULT_VOICE, len(ids)))[None]
        with torch.inference_mode():
            tokens = torch.tensor([[0, *ids, 0]], device=device)
            audio = model(tokens, ref.to(device), f0_scale=f0_scale).audio
            pieces += [audio.float().cpu().numpy(), np.zeros(4800, np.float32)]
    return np.concatenate(pieces[:-1])


def timed(fn: Callable[[], T], device: str) -> tuple[T, float]:
    synchronize(device)
    started = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, time.perf_counter() - started


def median_time(fn: Callable[[], object], device: str, repeats: int) -> float:
    """The median of ``repeats`` timed calls: one request's time, steady against a stray slow call."""
    return float(np.median([timed(fn, device)[1] for _ in range(max(repeats, 1))]))


def speak_kept(
    model: torch.nn.Module, sentences: list[list[int]], kept: FittedStyle, packs: VoicePacks, device: str
) -> np.ndarray:
    """A request with a kept voice as the backend serves it: the stored vector to the device, then speech."""
    style = torch.tensor(kept.vector, dtype=torch.float32)
    return speak(model, sentences, style, packs, device, kept.f0_scale)


def parity_rows(model: KokoroModel, bundle: dict[str, Any], packs: VoicePacks) -> list[dict[str, Any]]:
    session = reference_session(model_bytes())
    rows = []
    for ids in bundle["parity"]:
        for voice in ("jf_alpha", "jm_kumo"):
            report = compare(model, session, ids, packs.style(voice, len(ids)))
            rows.append({"tokens": len(ids), "voice": voice, **asdict(report)})
    return rows


def speed_rows(model: KokoroModel, bundle: dict[str, Any], packs: VoicePacks, device: str, soak: int) -> dict[str, Any]:
    import onnxruntime

    texts = list(bundle["eval"].values())
    speak(model, texts[0], None, packs, device)  # warm-up
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    audio, ours_s = timed(lambda: [speak(model, t, None, packs, device) for t in texts], device)
    seconds = sum(len(a) for a in audio) / 24000
    session = onnxruntime.InferenceSession(model_bytes(), providers=["CPUExecutionProvider"])
    started = time.perf_counter()
    for text in texts:
        for ids in text:
            style = packs.style(DEFAULT_VOICE, len(ids)).reshape(1, 256)
            feeds = {"tokens": np.array([[0, *ids, 0]]), "style": style, "speed": np.ones(1, np.float32)}
            session.run(None, feeds)
    ort_s = time.perf_counter() - started
    result: dict[str, Any] = {"audio_s": seconds, "ours_rtf": ours_s / seconds, "onnxruntime_cpu_rtf": ort_s / seconds}
    if device.startswith("cuda"):
        result["peak_allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
        everything = [s for t in [*texts, *bundle["extra"]] for s in t]
        allocated = []
        for i in range(soak):
            speak(model, [everything[(i * 7) % len(everything)]], None, packs, device)
            allocated.append(torch.cuda.memory_allocated() / 2**20)
        result |= {
            "soak_requests": soak,
            "soak_allocated_first_last_max_mib": [allocated[0], allocated[-1], max(allocated)],
            "soak_reserved_mib": torch.cuda.memory_reserved() / 2**20,
        }
    return result


def fit_rows(
    model: KokoroModel, bundle: dict[str, Any], packs: VoicePacks, device: str, out: Path, steps: int, repeats: int
) -> list[dict[str, Any]]:
    texts = BundledTexts(bundle["texts"])
    fitter = StyleFitter(model, texts, packs, device, FitSettings(steps=steps, check_every=min(10, steps)))
    rows = []
    eval_texts = list(bundle["eval"].values())
    for name, prompt in bundle["prompts"].items():
        samples = bundle["samples"][name]
        audio = PromptAudio(np.asarray(samples, np.float32), prompt["rate"], name, prompt["transcript"])
        fitted, fit_s = timed(functools.partial(fitter.fit, audio, f0_hz=prompt["f0_hz"]), device)
        kept = fitted.profile("kokoro", name)
        style = fitted.style.to(device)
        first = eval_texts[0]
        plain_s = median_time(functools.partial(speak, model, first, None, packs, device), device, repeats)
        cached_s = median_time(functools.partial(speak_kept, model, first, kept, packs, device), device, repeats)
        start = torch.from_numpy(packs.style(fitted.start_voice, 60)).to(device)
        spoken = {
            "base": [speak(model, t, start, packs, device) for t in eval_texts],
            "fitted": [speak(model, t, style, packs, device, fitted.f0_scale) for t in eval_texts],
            "unpitched": [speak(model, t, style, packs, device) for t in eval_texts],  # F0 as the fit left it
        }
        arrays = {
            f"{kind}_{i}": (a * 32767).astype(np.int16) for kind, a_s in spoken.items() for i, a in enumerate(a_s)
        }
        np.savez(out / f"{name}.npz", **arrays)  # type: ignore[arg-type]
        rows.append(
            {
                "prompt": name, "start_voice": fitted.start_voice, "fit_s": fit_s, "steps": fitted.steps,
                "ge2e_held_out_start": fitted.ge2e_start, "ge2e_held_out_fitted": fitted.ge2e_fitted,
                "plain_request_s": plain_s, "cached_request_s": cached_s, "f0_scale": fitted.f0_scale,
                "vector": list(kept.vector),  # the voice itself, to speak again anywhere
            }
        )  # fmt: skip
        print({k: v for k, v in rows[-1].items() if k != "vector"}, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--soak", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5, help="timed requests per prompt (plain and kept voice)")
    parser.add_argument("--fits-only", action="store_true", help="skip parity and speed (a slow CPU)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    unpack_site(args.bundle)
    bundle = json.loads((args.bundle / "bundle.json").read_text())
    with np.load(args.bundle / "prompts.npz") as arrays:
        bundle["samples"] = {name: arrays[name] for name in arrays.files}
    packs = read_voice_packs()
    model, load_s = timed(lambda: load_kokoro_model(args.device), args.device)
    report: dict[str, Any] = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"}
    report |= {"torch": torch.__version__, "load_s": load_s}
    if not args.fits_only:
        report["parity"] = parity_rows(model, bundle, packs)
        (args.out / "report.json").write_text(json.dumps(report, indent=1))
        report["speed"] = speed_rows(model, bundle, packs, args.device, args.soak)
        print(report["speed"], flush=True)
        (args.out / "report.json").write_text(json.dumps(report, indent=1))
    report["fits"] = fit_rows(model, bundle, packs, args.device, args.out, args.steps, args.repeats)
    (args.out / "report.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
