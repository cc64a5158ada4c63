"""``python -m voicelab eval styles``: each style as asked beside what the engine measured in the audio.

Speaks one English and one Chinese sentence with the built-in voices, neutral and under each instruction
(and dropdown), and prints the result line's figures (``StyleCheck``: duration x, median pitch st, loudness
dB, asked vs measured) beside the same figures measured against the neutral rendering of the same text, what
Whisper heard (WER in English, pinyin-syllable CER in Chinese: does the style keep the words?) and the ECAPA
judge's similarity of the styled voice to the neutral one (how far the style moved the speaker).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from voicelab.engine.core import EngineCore
from voicelab.engine.messages import SynthesisRequest, SynthesisResult
from voicelab.eval.clone_report import ERROR_NAME
from voicelab.instruct.controls import controls_to_style, resolve_style
from voicelab.judges.ecapa import EcapaJudge
from voicelab.judges.text import error_rate
from voicelab.judges.whisper import WhisperJudge
from voicelab.settings import Settings
from voicelab.voice.analysis import active_rms_dbfs, f0_median_hz
from voicelab.voice.measure import speech_seconds

TEXTS = {"en": "The garden looks lovely in the morning.", "zh": "今天早上的花园看起来很美。"}
CASES: tuple[tuple[str, dict[str, str]], ...] = (
    ("speak slowly and softly", {}),
    ("higher pitch, a bit louder", {}),
    ("sound tired and a bit annoyed", {}),
    ("用低沉沙哑的声音，很生气地说", {}),
    ("伤心地说", {}),
    ("", {"gender": "female"}),
    ("", {"gender": "female", "age": "child"}),
    ("deep, low voice", {"gender": "female"}),
    ("whisper", {}),
)


@dataclass(frozen=True)
class Row:
    language: str
    case: str
    check: str
    against_neutral: tuple[float, float, float]
    error: float  # Whisper's WER (en) or pinyin CER (zh) of the styled take, a fraction
    error_neutral: float
    similarity_to_neutral: float  # ECAPA cosine of the styled take to the neutral take


@dataclass(frozen=True)
class Listeners:
    whisper: WhisperJudge
    ecapa: EcapaJudge


def _measure(result: SynthesisResult, neutral: SynthesisResult) -> tuple[float, float, float]:
    """(duration x, pitch st, loudness dB) against the neutral rendering, by Praat and plain RMS."""
    sr = result.sample_rate
    f0, f0_neutral = f0_median_hz(result.audio, sr), f0_median_hz(neutral.audio, sr)
    pitch = 12.0 * float(np.log2(f0 / f0_neutral)) if f0 > 0 and f0_neutral > 0 else 0.0
    duration = speech_seconds(result.audio, sr) / max(1e-6, speech_seconds(neutral.audio, sr))
    return duration, pitch, active_rms_dbfs(result.audio, sr) - active_rms_dbfs(neutral.audio, sr)


def run(core: EngineCore, listeners: Listeners, seed: int = 3) -> list[Row]:
    rows = []
    for language, text in TEXTS.items():
        neutral = core.synthesize(SynthesisRequest(text=text, seed=seed))
        error_neutral = _error(listeners, neutral, text, language)
        reference = listeners.ecapa.embed(neutral.audio, neutral.sample_rate)
        for instruction, controls in CASES:
            style = resolve_style(instruction, controls_to_style(**controls)).style
            result = core.synthesize(SynthesisRequest(text=text, seed=seed, style=style))
            case = " + ".join(p for p in (instruction, ", ".join(f"{k} {v}" for k, v in controls.items())) if p)
            line = result.style_check.line() if result.style_check else "(no style check)"
            similarity = listeners.ecapa.similarities([result.audio], result.sample_rate, [reference])[0]
            error = _error(listeners, result, text, language)
            rows.append(Row(language, case, line, _measure(result, neutral), error, error_neutral, similarity))
    return rows


def _error(listeners: Listeners, result: SynthesisResult, text: str, language: str) -> float:
    return error_rate(text, listeners.whisper.transcribe(result.audio, result.sample_rate, language).text, language)


def summary(rows: list[Row]) -> list[str]:
    """One line per language: Whisper's mean error neutral -> styled, its worst case, the judge's range."""
    lines = []
    for language in TEXTS:
        mine = [row for row in rows if row.language == language]
        worst = max(mine, key=lambda row: row.error)
        similarities = [row.similarity_to_neutral for row in mine]
        lines.append(
            f"{language}: Whisper {ERROR_NAME[language]} {100 * mine[0].error_neutral:.0f}% neutral -> "
            f"{100 * float(np.mean([row.error for row in mine])):.0f}% styled (worst {100 * worst.error:.0f}%: "
            f"{worst.case}); ECAPA styled vs neutral {min(similarities):.2f}-{max(similarities):.2f}"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="voicelab eval styles", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--renderer", default="auto", help="voice renderer: auto, torch or world")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    core = EngineCore(Settings(device=args.device, voice_renderer=args.renderer, backend="builtin"))
    listeners = Listeners(WhisperJudge(threads=max(1, args.threads)), EcapaJudge(args.device))
    try:
        print(f"renderer {core.voice.renderer}, device {core.device}")
        print(
            "| text | style | result line (asked vs measured) | vs neutral: duration x / pitch st / loudness dB "
            "| Whisper error (neutral) | ECAPA to neutral |"
        )
        print("|---|---|---|---|---|---|")
        rows = run(core, listeners)
        for row in rows:
            d, p, loud = row.against_neutral
            print(
                f"| {row.language} | {row.case} | {row.check} | x{d:.2f} / {p:+.1f} / {loud:+.1f} "
                f"| {100 * row.error:.0f}% ({100 * row.error_neutral:.0f}%) | {row.similarity_to_neutral:.2f} |"
            )
        print("\n".join(summary(rows)))
    finally:
        core.close()
    return 0
