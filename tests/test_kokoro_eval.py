"""The Kokoro eval's matched table: fitted against fitted + matched, the search's verdict and the means."""

from __future__ import annotations

from voicelab.eval.kokoro import Voiced
from voicelab.eval.kokoro_matched import MatchedRow, format_rows


def row(name: str, fitted: float, matched: float, kept: bool, loudness_only: bool) -> MatchedRow:
    return MatchedRow(
        prompt=name,
        fitted=Voiced(ecapa=fitted, ge2e=0.8, wer=0.02, f0_hz=110.0, dnsmos=3.3),
        matched=Voiced(ecapa=matched, ge2e=0.82, wer=0.04, f0_hz=100.0, dnsmos=3.1),
        f0_prompt_hz=100.0,
        kept=kept,
        search=(0.8, 0.82, 14),
        loudness_only=loudness_only,
        search_s=7.0,
    )


def test_the_table_gives_each_prompt_and_the_means_and_what_the_engine_would_serve() -> None:
    text = format_rows([row("a", 0.30, 0.26, True, False), row("b", 0.20, 0.20, False, True)], "world")
    lines = text.splitlines()
    assert "engine keeps the match (world)" in lines[0]
    assert lines[2].startswith("| a | 0.800 → 0.820 (14) | yes | 0.300 → 0.260 (-0.040) |")
    assert "(14, loudness only)" in lines[3] and "| no |" in lines[3]
    assert "| **mean** | | 1 of 2 | 0.250 → 0.230 (-0.020) |" in lines[4]
    assert "error 10.0% → 0.0%" in lines[4] and "3.30 / 3.10" in lines[4]
    assert lines[-1].endswith("0.230")  # a matched (kept), b fitted
