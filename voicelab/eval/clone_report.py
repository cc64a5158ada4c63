"""``eval clone``'s figures: one row per prompt and language, the goal checks, and a summary line per judge."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

F0_TOLERANCE = 0.10
ERROR_TOLERANCE = 0.10  # the matched voice may lose at most this much intelligibility (absolute WER/CER)
ERROR_NAME = {"en": "WER", "zh": "CER"}  # Whisper's word error rate in English, pinyin-syllable error in Chinese


@dataclass(frozen=True)
class PromptEval:
    """One prompt on one voice, averaged over the texts. ``ecapa_*`` is the independent judge (ECAPA-TDNN),
    ``ge2e_*`` the match search's own objective; ``error_*`` Whisper's WER (en) or pinyin CER (zh), a fraction."""

    prompt: str
    language: str
    ecapa_base: float
    ecapa_matched: float
    ge2e_base: float
    ge2e_matched: float
    f0_prompt_hz: float
    f0_output_hz: float
    rtf: float
    error_base: float
    error_matched: float
    match_s: float
    plain_s: float = 0.0  # mean seconds per request: plain synthesis
    clone_s: float = 0.0  # the same plus the engine's voice stage (transform + scores) with a cached profile
    fell_back: bool = False  # the match lost to the unmatched voice on the held-out sentence: the engine keeps that
    dnsmos_base: float = float("nan")  # DNSMOS P.835 OVRL (1-5) of the unmatched and matched speech, where judged
    dnsmos_matched: float = float("nan")

    @property
    def ecapa_gain(self) -> float:
        return self.ecapa_matched - self.ecapa_base

    @property
    def ge2e_gain(self) -> float:
        return self.ge2e_matched - self.ge2e_base

    @property
    def f0_error(self) -> float:
        """Relative distance of the output's median F0 from the prompt's."""
        return abs(self.f0_output_hz / self.f0_prompt_hz - 1.0) if self.f0_prompt_hz > 0 else float("inf")


@dataclass(frozen=True)
class EvalReport:
    rows: tuple[PromptEval, ...]
    skipped: tuple[tuple[str, str], ...] = ()

    @property
    def clone_cost(self) -> float:
        """Cached-profile clone time over plain synthesis time, over all prompts and texts."""
        plain = sum(r.plain_s for r in self.rows)
        return sum(r.clone_s for r in self.rows) / plain if plain > 0 else float("inf")

    @property
    def mean_ecapa_gain(self) -> float:
        return float(np.mean([r.ecapa_gain for r in self.rows])) if self.rows else 0.0

    @property
    def mean_ge2e_gain(self) -> float:
        return float(np.mean([r.ge2e_gain for r in self.rows])) if self.rows else 0.0

    def mean_dnsmos(self) -> tuple[float, float] | None:
        """Mean DNSMOS OVRL base and matched over the rows judged by it (None without any)."""
        rows = [r for r in self.rows if np.isfinite(r.dnsmos_matched)]
        if not rows:
            return None
        return float(np.mean([r.dnsmos_base for r in rows])), float(np.mean([r.dnsmos_matched for r in rows]))

    def mean_errors(self, language: str) -> tuple[float, float] | None:
        """Mean error base and matched over the rows of one language (None without any)."""
        rows = [r for r in self.rows if r.language == language]
        if not rows:
            return None
        return float(np.mean([r.error_base for r in rows])), float(np.mean([r.error_matched for r in rows]))

    @property
    def none_below_base(self) -> bool:
        """By the judge: no prompt's matched voice is further from it than the unmatched voice."""
        return all(r.ecapa_matched >= r.ecapa_base for r in self.rows)

    @property
    def f0_within_tolerance(self) -> bool:
        return all(r.f0_error <= F0_TOLERANCE for r in self.rows)

    @property
    def errors_within_tolerance(self) -> bool:
        return all(r.error_matched <= r.error_base + ERROR_TOLERANCE for r in self.rows)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def format_report(report: EvalReport) -> str:
    """The table, the goal checks, a summary line per judge and, last, ``mean ECAPA gain: X``."""
    header = (
        f"{'prompt':<26} {'lang':<4} {'ECAPA base':>10} {'match':>6} {'gain':>7} {'GE2E base':>9} {'match':>6} "
        f"{'gain':>7} {'err base':>8} {'match':>6} {'F0 prompt':>9} {'F0 out':>7} {'RTF':>6} {'match s':>7} "
        f"{'plain s':>7} {'clone s':>7} {'DNSMOS':>6} {'match':>5}"
    )
    lines = [header, "-" * len(header)]
    for r in report.rows:
        name = f"{r.prompt} *" if r.fell_back else r.prompt
        lines.append(
            f"{name:<26} {r.language:<4} {r.ecapa_base:>10.3f} {r.ecapa_matched:>6.3f} {r.ecapa_gain:>+7.3f} "
            f"{r.ge2e_base:>9.3f} {r.ge2e_matched:>6.3f} {r.ge2e_gain:>+7.3f} {100 * r.error_base:>7.1f}% "
            f"{100 * r.error_matched:>5.1f}% {r.f0_prompt_hz:>9.1f} {r.f0_output_hz:>7.1f} {r.rtf:>6.3f} "
            f"{r.match_s:>7.1f} {r.plain_s:>7.3f} {r.clone_s:>7.3f} {r.dnsmos_base:>6.2f} {r.dnsmos_matched:>5.2f}"
        )
    lines.extend(f"skipped {name}: {reason}" for name, reason in report.skipped)
    if any(r.fell_back for r in report.rows):
        lines.append("* the match lost to the unmatched voice on the held-out sentence: the engine keeps the unmatched")
    lines.append(f"no prompt below base (ECAPA): {_yes(report.none_below_base)}")
    lines.append(f"output F0 within {F0_TOLERANCE:.0%} of prompt for all: {_yes(report.f0_within_tolerance)}")
    lines.append(
        f"Whisper error matched within base + {100 * ERROR_TOLERANCE:.0f} points for all: "
        f"{_yes(report.errors_within_tolerance)}"
    )
    lines.append(f"cached-profile clone / plain synthesis time: {report.clone_cost:.2f}x")
    for language, name in ERROR_NAME.items():
        errors = report.mean_errors(language)
        if errors is not None:
            lines.append(
                f"mean Whisper {name} ({language}): {100 * errors[0]:.1f}% base -> {100 * errors[1]:.1f}% matched"
            )
    quality = report.mean_dnsmos()
    if quality is not None:
        lines.append(f"mean DNSMOS OVRL (speech quality, 1-5): {quality[0]:.2f} base -> {quality[1]:.2f} matched")
    lines.append(f"mean GE2E gain (the search's objective): {report.mean_ge2e_gain:+.3f}")
    lines.append(f"mean ECAPA gain: {report.mean_ecapa_gain:+.3f}")
    return "\n".join(lines)
