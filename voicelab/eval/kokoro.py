"""``python -m voicelab eval clone --backend kokoro --prompts DIR --results DIR``: Kokoro's fitted voices judged.

The fits and their speech are made where the device is (``python -m tools.kokoro_device``, from the bundle of
``python -m tools.kokoro_clone bundle``; on a GPU box without the judges), and judged here on the CPU: for every
prompt, Piper's unmatched voice (the base the gain is measured over), Kokoro's nearest pack (where the fit starts)
and Kokoro fitted, each on the same Harvard sentence pairs: ECAPA similarity to the prompt (``judges.ecapa``, never
read by the fit), GE2E (what the fit raises), Whisper's WER, median F0 and its error against the prompt's; beside
them the fit's seconds and a request with the kept voice against plain Kokoro synthesis.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voicelab.eval.voices import SYNTHESIZERS
from voicelab.judges.ecapa import EcapaJudge
from voicelab.judges.text import error_rate
from voicelab.judges.whisper import WhisperJudge
from voicelab.voice.analysis import f0_median_hz, resample
from voicelab.voice.encoder import SpeakerEncoder
from voicelab.voice.intake import load_prompt

RATE = 24000


@dataclass(frozen=True)
class Voiced:
    """Mean figures of one voice over the evaluation texts against one prompt."""

    ecapa: float
    ge2e: float
    wer: float
    f0_hz: float


class Judges:
    def __init__(self) -> None:
        self.ecapa = EcapaJudge("cpu")
        self.ge2e = SpeakerEncoder("cpu")
        self.whisper = WhisperJudge(device="cpu", compute_type="int8", threads=2)
        self.heard: dict[int, float] = {}

    def wer(self, clip: np.ndarray, sr: int, text: str) -> float:
        return error_rate(text, self.whisper.transcribe(clip, sr, "en").text, "en")

    def voiced(self, clips: list[tuple[np.ndarray, int]], texts: list[str], prompt_path: Path) -> Voiced:
        prompt = load_prompt(prompt_path)
        reference = self.ecapa.embed(prompt.samples, prompt.sample_rate)
        target = self.ge2e.embed(resample(prompt.samples, prompt.sample_rate, 16000))
        ecapa = [self.ecapa.similarity(self.ecapa.embed(c, sr), reference) for c, sr in clips]
        ge2e = [self.ge2e.similarity(self.ge2e.embed(resample(c, sr, 16000)), target) for c, sr in clips]
        wer = [self.wer(c, sr, t) for (c, sr), t in zip(clips, texts, strict=True)]
        f0 = [f0_median_hz(c, sr) for c, sr in clips]
        return Voiced(float(np.mean(ecapa)), float(np.mean(ge2e)), float(np.mean(wer)), float(np.median(f0)))


def f0_error(output_hz: float, prompt_hz: float) -> float:
    """Relative median-F0 error against the prompt (the goal: within 5 %)."""
    return abs(output_hz - prompt_hz) / prompt_hz if prompt_hz > 0 else float("nan")


def judge_results(prompts: Path, results: Path, eval_texts: Sequence[str]) -> str:
    """A markdown table per prompt and the means: Piper unmatched, Kokoro's starting pack, Kokoro fitted
    (``eval_texts``: the English texts the device spoke, in order, as ``eval clone`` speaks them)."""
    report = json.loads((results / "report.json").read_text())
    judges = Judges()
    count = len(np.load(results / f"{report['fits'][0]['prompt']}.npz").files) // 2
    texts = list(eval_texts[:count])
    piper = [SYNTHESIZERS["torch"]("cpu")("en", t) for t in texts]
    lines = [
        "| prompt | start pack | ECAPA Piper → pack → fitted | gain over Piper | GE2E Piper → pack → fitted | "
        "WER Piper / pack / fitted | F0 prompt → fitted (Hz, error) | fit s (steps) | kept-voice / plain request |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    gains: list[float] = []
    rows: list[tuple[Voiced, Voiced, Voiced]] = []
    for fit in report["fits"]:
        path = prompts / f"{fit['prompt']}.wav"
        with np.load(results / f"{fit['prompt']}.npz") as arrays:
            base = [(arrays[f"base_{i}"].astype(np.float32) / 32767, RATE) for i in range(count)]
            fitted = [(arrays[f"fitted_{i}"].astype(np.float32) / 32767, RATE) for i in range(count)]
        p, b, f = (judges.voiced(c, texts, path) for c in (piper, base, fitted))
        prompt = load_prompt(path)
        f0 = f0_median_hz(prompt.samples, prompt.sample_rate)
        gains.append(f.ecapa - p.ecapa)
        rows.append((p, b, f))
        lines.append(
            f"| {fit['prompt']} | {fit['start_voice']} | {p.ecapa:.3f} → {b.ecapa:.3f} → {f.ecapa:.3f} | "
            f"{f.ecapa - p.ecapa:+.3f} | {p.ge2e:.3f} → {b.ge2e:.3f} → {f.ge2e:.3f} | "
            f"{p.wer:.1%} / {b.wer:.1%} / {f.wer:.1%} | {f0:.1f} → {f.f0_hz:.1f} ({f0_error(f.f0_hz, f0):.1%}) | "
            f"{fit['fit_s']:.1f} ({fit['steps']}) | {fit['cached_request_s']:.3f} / {fit['plain_request_s']:.3f} s "
            f"({fit['cached_request_s'] / fit['plain_request_s']:.2f}x) |"
        )
    piper_m, pack_m, fit_m = (float(np.mean([r[i].ecapa for r in rows])) for i in range(3))
    wers = [float(np.mean([r[i].wer for r in rows])) for i in range(3)]
    lines.append(
        f"| **mean** | | {piper_m:.3f} → {pack_m:.3f} → {fit_m:.3f} | **{np.mean(gains):+.3f}** | | "
        f"{wers[0]:.1%} / {wers[1]:.1%} / {wers[2]:.1%} | | | |"
    )
    return "\n".join(lines)
