"""``python -m voicelab eval clone --backend kokoro --prompts DIR --results DIR``: Kokoro's fitted voices judged.

The fits and their speech are made where the device is (``python -m tools.kokoro_device``, from the bundle of
``python -m tools.kokoro_clone bundle``; on a GPU box without the judges), and judged here on the CPU: for every
prompt, Piper's unmatched voice (the base the gain is measured over), Kokoro's nearest pack (where the fit starts)
and Kokoro fitted, each on the same Harvard sentence pairs: ECAPA similarity to the prompt (``judges.ecapa``, never
read by the fit), GE2E (what the fit raises), Whisper's WER, median F0 and its error against the prompt's, and
DNSMOS P.835's overall quality (``judges.dnsmos``: how clean each voice sounds, whoever it resembles); beside them
the fit's seconds and a request with the kept voice against plain Kokoro synthesis. ``--matched`` adds the
engine's signal-level matching on top of the fitted voice (``eval.kokoro_matched``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from voicelab.eval.voices import SYNTHESIZERS
from voicelab.judges.dnsmos import DnsmosJudge
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
    dnsmos: float  # DNSMOS P.835 OVRL, 1-5


class Judges:
    """The CPU's judges (ECAPA, Whisper, DNSMOS) and the GE2E encoder the fit raises, loaded once for a run."""

    def __init__(self) -> None:
        self.ecapa = EcapaJudge("cpu")
        self.ge2e = SpeakerEncoder("cpu")
        self.whisper = WhisperJudge(device="cpu", threads=2)
        self.dnsmos = DnsmosJudge(threads=2)

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
        quality = [self.dnsmos.score(c, sr).ovrl for c, sr in clips]
        mean = [float(np.mean(x)) for x in (ecapa, ge2e, wer, quality)]
        return Voiced(mean[0], mean[1], mean[2], float(np.median(f0)), mean[3])


def f0_error(output_hz: float, prompt_hz: float) -> float:
    """Relative median-F0 error against the prompt (the goal: within 5 %)."""
    return abs(output_hz - prompt_hz) / prompt_hz if prompt_hz > 0 else float("nan")


def read_report(results: Path) -> tuple[dict[str, Any], int]:
    """The device run's ``report.json`` and how many evaluation texts each prompt's ``.npz`` holds."""
    report = json.loads((results / "report.json").read_text())
    with np.load(results / f"{report['fits'][0]['prompt']}.npz") as arrays:
        return report, sum(name.startswith("base_") for name in arrays.files)


def spoken(results: Path, prompt: str, kind: str, count: int) -> list[tuple[np.ndarray, int]]:
    """The evaluation texts as the device spoke them for ``prompt``: ``kind`` is "base" (the pack), "fitted" or
    "unpitched" (fitted, F0 as the model predicts it); empty where the run did not speak that kind."""
    with np.load(results / f"{prompt}.npz") as arrays:
        if f"{kind}_0" not in arrays.files:
            return []
        return [(arrays[f"{kind}_{i}"].astype(np.float32) / 32767, RATE) for i in range(count)]


def judge_results(prompts: Path, results: Path, eval_texts: Sequence[str]) -> str:
    """A markdown table per prompt and the means: Piper unmatched, Kokoro's starting pack, Kokoro fitted
    (``eval_texts``: the English texts the device spoke, in order, as ``eval clone`` speaks them)."""
    report, count = read_report(results)
    judges = Judges()
    texts = list(eval_texts[:count])
    piper = [SYNTHESIZERS["torch"]("cpu")("en", t) for t in texts]
    lines = [
        "| prompt | start pack | ECAPA Piper → pack → fitted | gain over Piper | GE2E Piper → pack → fitted | "
        "WER Piper / pack / fitted | F0 prompt → fitted (Hz, error) | DNSMOS OVRL Piper / pack / fitted | "
        "fit s (steps) | kept-voice / plain request |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows: list[tuple[Voiced, Voiced, Voiced]] = []
    pitch_lines: list[str] = []
    for fit in report["fits"]:
        path = prompts / f"{fit['prompt']}.wav"
        base, fitted, unpitched = (spoken(results, fit["prompt"], k, count) for k in ("base", "fitted", "unpitched"))
        p, b, f = (judges.voiced(c, texts, path) for c in (piper, base, fitted))
        prompt = load_prompt(path)
        f0 = f0_median_hz(prompt.samples, prompt.sample_rate)
        rows.append((p, b, f))
        if unpitched:
            pitch_lines.append(pitch_row(fit, f0, judges.voiced(unpitched, texts, path), f))
        lines.append(
            f"| {fit['prompt']} | {fit['start_voice']} | {p.ecapa:.3f} → {b.ecapa:.3f} → {f.ecapa:.3f} | "
            f"{f.ecapa - p.ecapa:+.3f} | {p.ge2e:.3f} → {b.ge2e:.3f} → {f.ge2e:.3f} | "
            f"{p.wer:.1%} / {b.wer:.1%} / {f.wer:.1%} | {f0:.1f} → {f.f0_hz:.1f} ({f0_error(f.f0_hz, f0):.1%}) | "
            f"{p.dnsmos:.2f} / {b.dnsmos:.2f} / {f.dnsmos:.2f} | "
            f"{fit['fit_s']:.1f} ({fit['steps']}) | {fit['cached_request_s']:.3f} / {fit['plain_request_s']:.3f} s "
            f"({fit['cached_request_s'] / fit['plain_request_s']:.2f}x) |"
        )
    lines.append(mean_row(rows))
    if pitch_lines:
        lines += ["", *PITCH_HEADER, *pitch_lines]
    return "\n".join(lines)


PITCH_HEADER = (
    "| prompt | F0 scale | ECAPA unpitched → fitted | F0 unpitched → fitted (error) | WER unpitched / fitted |",
    "|---|---|---|---|---|",
)


def pitch_row(fit: dict[str, Any], prompt_hz: float, unpitched: Voiced, fitted: Voiced) -> str:
    """The same fitted vector with the F0 curve as the model predicts it and scaled to the prompt's pitch."""
    return (
        f"| {fit['prompt']} | {fit.get('f0_scale', 1.0):.3f}x | {unpitched.ecapa:.3f} → {fitted.ecapa:.3f} | "
        f"{unpitched.f0_hz:.1f} ({f0_error(unpitched.f0_hz, prompt_hz):.1%}) → {fitted.f0_hz:.1f} "
        f"({f0_error(fitted.f0_hz, prompt_hz):.1%}) | {unpitched.wer:.1%} / {fitted.wer:.1%} |"
    )


def mean_row(rows: Sequence[tuple[Voiced, Voiced, Voiced]]) -> str:
    """The table's last row: mean ECAPA, the mean gain over Piper, mean WER and mean DNSMOS OVRL."""
    ecapa, wer, quality = ([float(np.mean([getattr(r[i], key) for r in rows])) for i in range(3)]
                           for key in ("ecapa", "wer", "dnsmos"))  # fmt: skip
    return (
        f"| **mean** | | {ecapa[0]:.3f} → {ecapa[1]:.3f} → {ecapa[2]:.3f} | **{ecapa[2] - ecapa[0]:+.3f}** | | "
        f"{wer[0]:.1%} / {wer[1]:.1%} / {wer[2]:.1%} | | {quality[0]:.2f} / {quality[1]:.2f} / {quality[2]:.2f} | | |"
    )
