"""Side-by-side time of the voice renderers (torch, mel, world) on one utterance with a typical match's transform.

What a cached-profile clone adds to plain synthesis is the renderer plus the two encoders' scoring; the scoring is
the same for every renderer, so the renderers alone, timed on the same audio in one run, say how a clone's time
moves with the renderer. Each renderer gets warm-up runs, then ``--runs`` timed ones (the device synchronised
before each clock read); runs are interleaved, the renderer order rotating. Prints p50/p95 per renderer, each
one's p95 over the torch renderer's, and the median F0 each output lands on (PyTorch's YIN tracker).

``--audio FILE`` takes a speech clip (the built-in voice by default, which needs the voice installed).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch

from voicelab.voice.analysis import LTAS_BANDS
from voicelab.voice.dsp import RENDERERS, VoiceTransform, apply_transform
from voicelab.voice.pitch import voiced_median, yin_f0

T = TypeVar("T")

TEXT = (
    "On a quiet morning in early spring, the old lighthouse keeper climbed the winding stairs once more, "
    "polished the great lens until it gleamed, and watched the fishing boats drift slowly out to sea."
)
# A typical match toward a higher voice: pitch target, wider range, formants up, a gentle EQ and a level change.
MATCH = VoiceTransform(
    f0_target_hz=190.0,
    pitch_range=1.2,
    formant_factor=1.08,
    eq_gains_db=tuple(float(g) for g in np.linspace(-2.0, 3.0, LTAS_BANDS)),
    gain_db=-2.0,
)


@dataclass(frozen=True)
class Timing:
    renderer: str
    seconds: list[float]
    f0_hz: float

    def quantile(self, q: float) -> float:
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _speech(path: str | None, device: str) -> tuple[np.ndarray, int]:
    if path is not None:
        import soundfile as sf

        audio, sr = sf.read(Path(path), dtype="float32", always_2d=True)
        return np.ascontiguousarray(audio[:, 0]), int(sr)
    from voicelab.eval.voices import builtin_torch_synthesizer

    return builtin_torch_synthesizer(device)("en", TEXT)


def _median_f0(audio: np.ndarray, sr: int) -> float:
    with torch.inference_mode():
        track = yin_f0(torch.from_numpy(audio).unsqueeze(0), sr, max(1, sr // 100))
    return float(voiced_median(track)[0])


def timed_on(device: str, step: Callable[[], T]) -> tuple[T, float]:
    """``step()`` and the seconds it took, the device synchronised before and after (its queued work counted in)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    out = step()
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    return out, time.perf_counter() - started


def measure(audio: np.ndarray, sr: int, renderers: Sequence[str], device: str, runs: int, warmup: int) -> list[Timing]:
    """Interleaved timed runs of each renderer on ``audio``; the order rotates from run to run."""
    seconds: dict[str, list[float]] = {r: [] for r in renderers}
    outputs: dict[str, np.ndarray] = {}
    for run in range(warmup + runs):
        shift = run % len(renderers)
        for renderer in [*renderers[shift:], *renderers[:shift]]:
            render = functools.partial(apply_transform, audio, sr, MATCH, device, renderer)
            outputs[renderer], took = timed_on(device, render)
            if run >= warmup:
                seconds[renderer].append(took)
    return [Timing(r, seconds[r], _median_f0(outputs[r], sr)) for r in renderers]


def format_table(timings: Sequence[Timing], audio_s: float, device: str) -> str:
    base = next((t for t in timings if t.renderer == "torch"), timings[0])
    lines = [
        f"renderers on {device}, {audio_s:.1f} s of speech, transform: target 190 Hz, range x1.2, formants x1.08, EQ",
        "| renderer | p50 ms | p95 ms | p95 / torch's | output F0 (Hz) |",
        "|---|---|---|---|---|",
    ]
    for t in timings:
        ratio = t.quantile(0.95) / base.quantile(0.95)
        lines.append(
            f"| {t.renderer} | {1e3 * statistics.median(t.seconds):.1f} | {1e3 * t.quantile(0.95):.1f} "
            f"| {ratio:.2f} | {t.f0_hz:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="voicelab bench renderers", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--renderers", default=",".join(RENDERERS), help="comma-separated: " + ", ".join(RENDERERS))
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="PyTorch CPU threads (0: PyTorch's default)")
    parser.add_argument("--audio", default=None, help="speech clip to render (default: the built-in voice)")
    args = parser.parse_args(argv)
    renderers = [r.strip() for r in args.renderers.split(",") if r.strip()]
    unknown = [r for r in renderers if r not in RENDERERS]
    if unknown or not renderers or args.runs < 1:
        parser.error(f"--renderers takes {', '.join(RENDERERS)} and --runs at least 1")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    audio, sr = _speech(args.audio, args.device)
    timings = measure(audio, sr, renderers, args.device, args.runs, args.warmup)
    print(format_table(timings, len(audio) / sr, args.device))
    return 0
