"""``eval clone --backend kokoro --matched``: does the engine's signal-level matching raise the fitted voice further?

The engine adds no matching to a backend that clones natively, so this measures whether it should. Per prompt, as
the engine matches the built-in voices: the match search (``VoiceMatcher``: GE2E, the engine's default WORLD
renderer) calibrates on the fitted voice's first evaluation text, the held-out check on its second says whether the
engine would keep the transform, and the remaining texts, spoken by the fitted voice, are judged without and with
the transform (ECAPA, GE2E, Whisper WER, median F0, DNSMOS OVRL). No judge is read by the search.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voicelab.eval.kokoro import Judges, Voiced, f0_error, read_report, spoken
from voicelab.voice.analysis import f0_median_hz
from voicelab.voice.dsp import VoiceTransform, apply_transform
from voicelab.voice.intake import load_prompt
from voicelab.voice.matcher import VoiceMatcher
from voicelab.voice.profile import build_profile

CALIBRATION = 0  # the fitted voice's utterance the search calibrates on
HELD_OUT = 1  # the one the engine's check scores; the texts after it are judged
RENDERER = "world"  # the engine's default on a CPU ("auto"; pulse on a GPU)
LOUDNESS_ONLY = {True: ", loudness only", False: ""}


@dataclass(frozen=True)
class MatchedRow:
    """One prompt's fitted voice without and with the match's transform, on the same judged texts."""

    prompt: str
    fitted: Voiced
    matched: Voiced
    f0_prompt_hz: float
    kept: bool  # the held-out check: the engine would keep the transform (else it keeps the fitted voice alone)
    search: tuple[float, float, int]  # GE2E on the calibration utterance: fitted, the best candidate; candidates
    loudness_only: bool  # no candidate beat the fitted voice: the transform is its loudness alone
    search_s: float


def match_fitted(prompts: Path, results: Path, eval_texts: Sequence[str], renderer: str = RENDERER) -> str:
    """The table of fitted against fitted + matched per prompt and the means, for the device run in ``results``."""
    report, count = read_report(results)
    if count <= HELD_OUT + 1:
        raise ValueError(f"{results} holds {count} texts per prompt: matching needs three or more")
    judges = Judges()
    matcher = VoiceMatcher(judges.ge2e, renderer=renderer)
    texts = list(eval_texts[HELD_OUT + 1 : count])
    rows = [
        matched_row(prompts / f"{fit['prompt']}.wav", spoken(results, fit["prompt"], "fitted", count), texts,
                    matcher, judges)
        for fit in report["fits"]
    ]  # fmt: skip
    return format_rows(rows, renderer)


def matched_row(
    path: Path, fitted: list[tuple[np.ndarray, int]], texts: list[str], matcher: VoiceMatcher, judges: Judges
) -> MatchedRow:
    """Search on the calibration utterance, check on the held-out one, judge the rest without and with."""
    prompt = load_prompt(path)
    profile = build_profile(prompt, matcher.encoder, matcher.encoder.device)
    calibration, held_out = fitted[CALIBRATION], fitted[HELD_OUT]
    match = matcher.match(profile, lambda: calibration)
    held_base, held_matched = matcher.held_out_scores(profile, held_out[0], held_out[1], match.transform)
    judged = fitted[HELD_OUT + 1 :]
    device = matcher.encoder.device
    matched = [(apply_transform(c, sr, match.transform, device, matcher.renderer), sr) for c, sr in judged]
    return MatchedRow(
        prompt=path.stem,
        fitted=judges.voiced(judged, texts, path),
        matched=judges.voiced(matched, texts, path),
        f0_prompt_hz=f0_median_hz(prompt.samples, prompt.sample_rate),
        kept=held_matched >= held_base,
        search=(match.similarity_base, match.similarity_matched, match.evaluations),
        loudness_only=match.transform == VoiceTransform(gain_db=match.transform.gain_db),
        search_s=match.seconds,
    )


def format_rows(rows: Sequence[MatchedRow], renderer: str) -> str:
    """A markdown table: fitted → fitted + matched for each judge, whether the engine keeps it, and the means."""
    lines = [
        f"| prompt | search: GE2E fitted → best (candidates) | engine keeps the match ({renderer}) | "
        "ECAPA fitted → matched | GE2E fitted → matched | WER fitted / matched | "
        "F0 prompt: fitted → matched (Hz, error) | DNSMOS OVRL fitted / matched | search s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        f, m = r.fitted, r.matched
        lines.append(
            f"| {r.prompt} | {r.search[0]:.3f} → {r.search[1]:.3f} ({r.search[2]}{LOUDNESS_ONLY[r.loudness_only]}) "
            f"| {'yes' if r.kept else 'no'} | {f.ecapa:.3f} → {m.ecapa:.3f} ({m.ecapa - f.ecapa:+.3f}) | "
            f"{f.ge2e:.3f} → {m.ge2e:.3f} | {f.wer:.1%} / {m.wer:.1%} | {r.f0_prompt_hz:.1f}: "
            f"{f.f0_hz:.1f} ({f0_error(f.f0_hz, r.f0_prompt_hz):.1%}) → {m.f0_hz:.1f} "
            f"({f0_error(m.f0_hz, r.f0_prompt_hz):.1%}) | {f.dnsmos:.2f} / {m.dnsmos:.2f} | {r.search_s:.1f} |"
        )
    mean = {
        key: [float(np.mean([getattr(getattr(r, side), key) for r in rows])) for side in ("fitted", "matched")]
        for key in ("ecapa", "ge2e", "wer", "dnsmos")
    }
    f0_err = [
        float(np.mean([f0_error(getattr(r, s).f0_hz, r.f0_prompt_hz) for r in rows])) for s in ("fitted", "matched")
    ]
    kept = [r.matched.ecapa if r.kept else r.fitted.ecapa for r in rows]
    lines.append(
        f"| **mean** | | {sum(r.kept for r in rows)} of {len(rows)} | {mean['ecapa'][0]:.3f} → {mean['ecapa'][1]:.3f} "
        f"({mean['ecapa'][1] - mean['ecapa'][0]:+.3f}) | {mean['ge2e'][0]:.3f} → {mean['ge2e'][1]:.3f} | "
        f"{mean['wer'][0]:.1%} / {mean['wer'][1]:.1%} | error {f0_err[0]:.1%} → {f0_err[1]:.1%} | "
        f"{mean['dnsmos'][0]:.2f} / {mean['dnsmos'][1]:.2f} | |"
    )
    lines.append(
        f"\nmean ECAPA as the engine would serve it (matched where the held-out check keeps it): {np.mean(kept):.3f}"
    )
    return "\n".join(lines)
