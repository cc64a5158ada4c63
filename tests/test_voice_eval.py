"""``eval clone``: its report (both judges, Whisper's error per language) and one real prompt end to end."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from tests.judges import whisper_judge
from voicelab.eval.clone import Judges, evaluate
from voicelab.eval.clone_report import EvalReport, PromptEval, format_report
from voicelab.eval.voices import builtin_torch_synthesizer
from voicelab.judges.dnsmos import DnsmosJudge
from voicelab.judges.ecapa import EcapaJudge
from voicelab.voice.encoder import SpeakerEncoder

DATA = Path(__file__).parent / "data"


def _row(
    prompt: str, language: str, ecapa: tuple[float, float], ge2e: tuple[float, float], errors: tuple[float, float]
):
    return PromptEval(prompt, language, *ecapa, *ge2e, 200.0, 190.0, 0.3, *errors, 5.0)


def test_report_gives_each_judge_its_line_and_ends_with_the_ecapa_gain() -> None:
    rows = (
        _row("a", "en", (0.20, 0.26), (0.50, 0.62), (0.05, 0.10)),
        _row("b", "en", (0.30, 0.28), (0.55, 0.61), (0.05, 0.30)),
        _row("a", "zh", (0.10, 0.14), (0.40, 0.50), (0.08, 0.12)),
    )
    report = EvalReport(rows)
    lines = format_report(report).splitlines()
    assert lines[-1] == "mean ECAPA gain: +0.027"
    assert lines[-2] == "mean GE2E gain (the search's objective): +0.093"
    assert "mean Whisper WER (en): 5.0% base -> 20.0% matched" in lines
    assert "mean Whisper CER (zh): 8.0% base -> 12.0% matched" in lines
    assert "no prompt below base (ECAPA): no" in lines  # b lost similarity by the judge, though GE2E rose
    assert "Whisper error matched within base + 10 points for all: no" in lines  # b: 5 % -> 30 %


def test_report_without_chinese_rows_has_no_cer_line() -> None:
    text = format_report(EvalReport((_row("a", "en", (0.2, 0.3), (0.5, 0.6), (0.0, 0.0)),)))
    assert "CER" not in text and "mean Whisper WER (en): 0.0% base -> 0.0% matched" in text


@pytest.mark.slow
def test_one_real_prompt_is_matched_and_judged_in_both_languages(tmp_path: Path) -> None:
    """slt (US English, female) onto both built-in voices: the match search's GE2E never falls below the unmatched
    voice on the calibration sentence, the output lands near her pitch, and Whisper still hears the words."""
    for suffix in (".wav", ".txt"):
        shutil.copy(DATA / f"arctic_slt_en_female{suffix}", tmp_path / f"slt{suffix}")
    judges = Judges(SpeakerEncoder("cpu"), EcapaJudge("cpu"), whisper_judge(), DnsmosJudge())
    english = "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background."
    texts = {"en": (english,), "zh": ("妈妈做的饺子是我最喜欢的菜。",)}
    report = evaluate(tmp_path, texts, builtin_torch_synthesizer(), judges, renderer="torch")
    assert [(r.prompt, r.language) for r in report.rows] == [("slt", "en"), ("slt", "zh")]
    for row in report.rows:
        assert row.f0_error < 0.15, row
        assert -1.0 <= row.ecapa_base <= 1.0 and -1.0 <= row.ecapa_matched <= 1.0
        assert row.error_base <= 0.3 and row.error_matched <= 0.4, row  # heard: the voice and the clone say it
        assert 1.0 <= row.dnsmos_base <= 5.0 and 1.0 <= row.dnsmos_matched <= 5.0, row  # judged, on its scale


def test_report_gives_dnsmos_its_line_only_where_it_judged() -> None:
    judged = replace(_row("a", "en", (0.2, 0.3), (0.5, 0.6), (0.0, 0.0)), dnsmos_base=3.1, dnsmos_matched=2.7)
    text = format_report(EvalReport((judged,)))
    assert "mean DNSMOS OVRL (speech quality, 1-5): 3.10 base -> 2.70 matched" in text
    unjudged = format_report(EvalReport((_row("a", "en", (0.2, 0.3), (0.5, 0.6), (0.0, 0.0)),)))
    assert "mean DNSMOS" not in unjudged
