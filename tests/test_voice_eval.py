"""The clone evaluation's measures: word error rate, the recogniser on real speech, and the report's last line."""

from __future__ import annotations

from pathlib import Path

import pytest
import soundfile as sf

from voicelab.eval.asr import Recognizer, word_error_rate
from voicelab.eval.clone import EvalReport, PromptEval, format_report

DATA = Path(__file__).parent / "data"


def test_word_error_rate_counts_edits_per_reference_word() -> None:
    assert word_error_rate("The birch canoe slid.", "the birch canoe slid") == 0.0
    assert word_error_rate("a b c d", "a x c") == pytest.approx(0.5)  # one substitution, one deletion
    assert word_error_rate("a b", "a b c d") == pytest.approx(1.0)  # two insertions
    assert word_error_rate("It's easy", "it's easy") == 0.0


def test_recogniser_understands_a_real_english_clip() -> None:
    audio, sr = sf.read(DATA / "arctic_awb_en_male.wav", dtype="float32")
    reference = (DATA / "arctic_awb_en_male.txt").read_text(encoding="utf-8")
    assert word_error_rate(reference, Recognizer().transcribe(audio, sr)) < 0.5


def test_report_ends_with_the_mean_gain() -> None:
    rows = (
        PromptEval("a", 0.50, 0.62, 200.0, 190.0, 0.3, 0.30, 0.35, 5.0),
        PromptEval("b", 0.55, 0.61, 100.0, 120.0, 0.3, 0.30, 0.45, 5.0),
    )
    report = EvalReport(rows)
    text = format_report(report)
    assert text.splitlines()[-1] == "mean similarity gain: +0.090"
    assert report.none_below_base and not report.f0_within_tolerance and not report.wer_within_tolerance
    assert "output F0 within 10% of prompt for all: no" in text
