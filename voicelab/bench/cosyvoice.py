"""CosyVoice soak and speed: VoiceLab's engine vs upstream driven as its webui does, side by side in one run.

    python -m voicelab bench cosyvoice --model-dir DIR [--code DIR] [--requests 200] [--dtype float32]
        [--max-chars 200] [--stream-requests 8] [--stream-chars 200] [--clients 1,2,4,8] [--upstream-clients 1,8]
        [--probe-dtype float16] [--backend-options decode_slots=16] [--json OUT.json]

The same deterministic workload for both: zero-shot requests of 5 to ``--max-chars`` characters (lengths skewed
toward short, as real requests are; one in four Mandarin), with the four prompts in tests/data, three requests in
four a new prompt (a different cut of one of them, so a voice no cache holds). Each side runs in its own spawned
process on the same GPU, one after the other; upstream is driven as its webui.py drives it (``inference_zero_shot``
per request, a new speaker entry per prompt, two requests at once at most). Per side: latency p50/p95, RTF, speech
tokens/s, time to first audio, throughput at each ``--clients`` count, and per window of requests the allocator's
allocated, reserved and inactive-split bytes, NVML memory used by the process and host RSS. VoiceLab also runs
streamed requests, the shape of NVIDIA's Triton+TRT-LLM benchmark (``--anchor-requests``, ``cosyvoice_anchor``: its
line sets our RTF at 1 and 4 clients beside that stack's on an L20), a Soft restart (VRAM after it vs a fresh start)
and, in a third process, the first requests again in ``--probe-dtype`` for its peak beside float32's (either side
may be the float32 one: ``--dtype bfloat16 --probe-dtype float32`` works too). The goal lines at the end say pass or
FAIL, by the model's version (``SPEED_GOALS``: CosyVoice3's are its own).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from voicelab.bench.cosyvoice_anchor import CORPUS_ZH, anchor_line, rtf_by_clients
from voicelab.bench.cosyvoice_sides import WINDOW, Job, run_dtype_probe, run_upstream, run_voicelab
from voicelab.bench.soak import CORPUS, base_prompts

TOKENS_PER_S = 25
MIB = 2**20


def _text(rng: random.Random, max_chars: int, chinese: bool) -> str:
    corpus, longest = (CORPUS_ZH, min(max_chars, 100)) if chinese else (CORPUS, max_chars)
    length = 5 + int((longest - 5) * rng.random() ** 2)  # 5..longest, mean about a third of the way
    start = rng.randrange(0, len(corpus) - length)
    while corpus[start] == " ":  # start on a word, so the text keeps its drawn length
        start += 1
    return corpus[start : start + length].rstrip() if length > 5 else corpus[start : start + 5]


def workload(n: int, max_chars: int, folder: Path, seed: int = 0) -> list[Job]:
    import soundfile as sf

    rng = random.Random(seed)
    bases = base_prompts()
    jobs = []
    for index in range(n):
        text = _text(rng, max_chars, chinese=index % 4 == 3)
        base = bases[index % len(bases)]
        prompt = str(base)
        if index % 4 != 0:  # a new prompt: a different cut of the clip, so a voice new to every cache
            samples, rate = sf.read(base, dtype="float32")
            prompt = str(folder / f"new_{index}.wav")
            sf.write(prompt, samples[int(rate * 0.01 * (index % 29 + 1)) :], rate)
        jobs.append(Job(text, prompt, base.with_suffix(".txt").read_text().strip(), seed + index))
    return jobs


def short_jobs(count: int = 8) -> list[Job]:
    """The throughput phase's requests: one sentence each, the four base prompts (cached after the soak)."""
    bases = base_prompts()
    sentences = [s.strip() for s in re.findall(r"[^.?!]+[.?!]", CORPUS) if len(s.strip()) > 20]
    return [
        Job(sentences[i % len(sentences)], str(bases[i % 4]), bases[i % 4].with_suffix(".txt").read_text().strip(), i)
        for i in range(count)
    ]


def _in_process(target: Callable[..., None], args: argparse.Namespace, jobs: list[Job]) -> dict[str, Any]:
    """Run one side in a spawned process; a side that dies or hangs ends the bench with a sentence, not a hang."""
    context = mp.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=target, args=(args, jobs, short_jobs(), child))
    process.start()
    child.close()  # so that recv() sees the end of the pipe if the side dies
    try:
        if not parent.poll(args.side_timeout_s):
            raise SystemExit(f"{target.__name__} gave no result within {args.side_timeout_s:.0f} s")
        result: dict[str, Any] = parent.recv()
    except EOFError:
        raise SystemExit(f"{target.__name__} died (exit code {process.exitcode}); its log is above") from None
    finally:
        process.join(5)
        if process.is_alive():
            process.kill()
    return result


def summary(rows: Sequence[Sequence[float]]) -> dict[str, float]:
    latency = np.array([r[0] for r in rows])
    first = np.array([r[1] for r in rows])
    audio = np.array([r[2] for r in rows])
    return {
        "requests": len(rows),
        "p50_s": float(np.percentile(latency, 50)),
        "p95_s": float(np.percentile(latency, 95)),
        "rtf": float(latency.sum() / max(audio.sum(), 1e-9)),
        "tokens_per_s": float(audio.sum() * TOKENS_PER_S / latency.sum()),
        "ttfa_p50_s": float(np.percentile(first, 50)),
        "audio_s": float(audio.sum()),
        **_long_rtf(latency, audio),
    }


def _long_rtf(latency: np.ndarray, audio: np.ndarray, seconds: float = 8.0) -> dict[str, float]:
    """RTF over the requests of at least ``seconds`` of audio (the goal names a 10 s utterance)."""
    long = audio >= seconds
    if not long.any():
        return {}
    return {"rtf_8s_plus": float(latency[long].sum() / audio[long].sum()), "requests_8s_plus": int(long.sum())}


def _print_side(label: str, result: dict[str, Any]) -> None:
    figures = {k: round(v, 3) for k, v in summary(result["rows"]).items()}
    print(f"{label}: load {result['load_s']:.1f} s, " + json.dumps(figures))
    for s in result["samples"]:
        cells = {k: s[k] / MIB for k in ("allocated", "reserved", "inactive_split", "nvml_used", "rss")}
        print(f"  window {s['window']:>2}: " + "  ".join(f"{k} {v:8.1f} MiB" for k, v in cells.items()))
    for row in result["throughput"]:
        print(
            f"  {row['clients']} clients: {row['requests']} requests in {row['wall_s']:.1f} s, "
            f"{row['requests_per_s']:.2f} req/s, {row['audio_s_per_s']:.2f} audio s/s, p50 {row['p50_s']:.2f} s"
        )


def _after_warm_up(samples: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The first window's sample (the warm-up done) and the last one; ``None`` when no window came after it (a side
    run on fewer than two windows of requests cannot tell growth)."""
    if len(samples) < 3:  # samples[0] is taken after loading, one more per window of requests
        return None
    return samples[1], samples[-1]


def _allocated_growth(result: dict[str, Any]) -> float | None:
    """Allocated bytes gained after the warm-up, in MiB."""
    span = _after_warm_up(result["samples"])
    return None if span is None else (span[1]["allocated"] - span[0]["allocated"]) / MIB


def _rss_per_call(result: dict[str, Any]) -> float | None:
    """Host RSS growth per request after the first window (the warm-up), in MiB."""
    span = _after_warm_up(result["samples"])
    if span is None:
        return None
    calls = (span[1]["window"] - span[0]["window"]) * WINDOW
    return (span[1]["rss"] - span[0]["rss"]) / MIB / max(calls, 1)


Goal = tuple[str, float | None, str, bool]  # name, figure (None: this run cannot tell), goal, met


@dataclass(frozen=True)
class SpeedGoals:
    """A model's speed goals (None: none set for it)."""

    rtf_alone: float
    p50_alone_s: float | None
    first_audio_cached_s: float
    first_audio_new_s: float
    aggregate_rtf_16: float | None


SPEED_GOALS = {  # by CosyVoice version: CosyVoice3's are its RTF and first audio alone
    2: SpeedGoals(rtf_alone=0.05, p50_alone_s=0.4, first_audio_cached_s=0.15, first_audio_new_s=0.25,
                  aggregate_rtf_16=0.02),
    3: SpeedGoals(rtf_alone=0.08, p50_alone_s=None, first_audio_cached_s=0.2, first_audio_new_s=0.25,
                  aggregate_rtf_16=None),
}  # fmt: skip


def _at_most(value: float | None, limit: float) -> bool:
    return value is not None and value <= limit


def goal_lines(
    ours: dict[str, Any],
    upstream: dict[str, Any] | None,
    probe: dict[str, Any] | None,
    dtypes: tuple[str, str] = ("float32", "float16"),
    version: int = 2,
) -> list[str]:
    """The goals, each as 'name: figure (goal) pass|FAIL', or 'name: n/a (goal)' where a side ran too few
    requests to tell. ``dtypes``: the run's own and the probe's (either may be the float32 side); ``version``:
    the CosyVoice model's, whose speed goals apply."""
    speed = SPEED_GOALS[version]
    samples, growth, rss = ours["samples"], _allocated_growth(ours), _rss_per_call(ours)
    lines: list[Goal] = [
        ("allocated growth after warm-up, MiB", growth, "<= 1", _at_most(growth, 1.0)),
        ("inactive split after loading, MiB", samples[0]["inactive_split"] / MIB, "0",
         samples[0]["inactive_split"] == 0),
        ("host RSS growth per zero-shot call, MiB", rss, "<= 1", _at_most(rss, 1.0)),
        ("Soft restart VRAM minus a fresh start's, MiB", (ours["restarted_nvml"] - ours["fresh_nvml"]) / MIB,
         "<= 64", ours["restarted_nvml"] - ours["fresh_nvml"] <= 64 * MIB),
    ]  # fmt: skip
    if upstream is not None:
        reserved = max(s["reserved"] for s in samples), max(s["reserved"] for s in upstream["samples"])
        same = ours["rows"][: len(upstream["rows"])]  # the same requests (upstream may run only the first N)
        p50 = summary(same)["p50_s"] / summary(upstream["rows"])["p50_s"]
        lines += [
            ("max reserved, voicelab / upstream", reserved[0] / reserved[1], "<= 1", reserved[0] <= reserved[1]),
            ("p50 latency, voicelab / upstream", p50, "<= 1.05", p50 <= 1.05),
            ("upstream host RSS growth per zero-shot call, MiB", _rss_per_call(upstream), "(reference)", True),
        ]
        lines += _throughput_lines(ours, upstream)
    for voice, goal in (("cached voice", speed.first_audio_cached_s), ("new voice", speed.first_audio_new_s)):
        rows = _streamed_by_voice(ours.get("streamed", [])).get(voice)
        if rows:
            first = summary(rows)["ttfa_p50_s"]
            lines.append((f"streamed first audio p50, {voice}, s", first, f"<= {goal:g}", first <= goal))
    lines += _speed_lines(ours, speed)
    if probe is not None:
        lines.append(_peak_line(ours["probe_peak"], probe["probe_peak"], dtypes))
    return [_goal_line(*line) for line in lines]


def _peak_line(own_peak: float, probe_peak: float, dtypes: tuple[str, str]) -> Goal:
    """The reduced precision's peak over float32's, whichever side ran which (n/a where neither is float32)."""
    own, probed = dtypes
    name = f"{probed if own == 'float32' else own} peak / float32 peak"
    if "float32" not in dtypes or own == probed:
        return name, None, "<= 0.65", False
    ratio = probe_peak / own_peak if own == "float32" else own_peak / probe_peak
    return name, ratio, "<= 0.65", ratio <= 0.65


def _speed_lines(ours: dict[str, Any], goals: SpeedGoals) -> list[Goal]:
    """One ~8.5 s request alone (the anchor phase at one client) and the aggregate RTF of 16 clients."""
    lines: list[Goal] = []
    anchor = ours.get("anchor")
    if anchor:
        alone = rtf_by_clients(anchor).get(1)
        lines.append(("RTF of one ~8.5 s request alone", alone, f"<= {goals.rtf_alone:g}",
                      _at_most(alone, goals.rtf_alone)))  # fmt: skip
        p50 = next((row["p50_s"] for row in anchor["throughput"] if row["clients"] == 1), None)
        if goals.p50_alone_s is not None:
            lines.append(("p50 latency of one ~8.5 s request alone, s", p50, f"<= {goals.p50_alone_s:g}",
                          _at_most(p50, goals.p50_alone_s)))  # fmt: skip
    for row in ours.get("throughput", []):
        if goals.aggregate_rtf_16 is not None and row["clients"] == 16 and "audio_s_per_s" in row:
            rtf = 1.0 / max(row["audio_s_per_s"], 1e-9)
            lines.append(("aggregate RTF at 16 clients", rtf, f"<= {goals.aggregate_rtf_16:g}",
                          rtf <= goals.aggregate_rtf_16))  # fmt: skip
    return lines


def _goal_line(name: str, value: float | None, goal: str, ok: bool) -> str:
    if value is None:
        return f"{name}: n/a (goal {goal})"
    return f"{name}: {value:.3f} (goal {goal}) {'pass' if ok else 'FAIL'}"


def _streamed_by_voice(rows: Sequence[Sequence[float]]) -> dict[str, list[Sequence[float]]]:
    """Streamed rows (latency, first audio, duration, cached) split by whether the voice was cached."""
    split: dict[str, list[Sequence[float]]] = {}
    for row in rows:
        split.setdefault("cached voice" if len(row) > 3 and row[3] else "new voice", []).append(row)
    return split


def _throughput_lines(ours: dict[str, Any], upstream: dict[str, Any]) -> list[Goal]:
    """Requests/s at 8 and 16 clients over upstream's at the same count, or at its largest one when it ran fewer
    (its webui serves two at a time, so past two clients its throughput is flat)."""
    theirs = {row["clients"]: row["requests_per_s"] for row in upstream.get("throughput", [])}
    lines: list[Goal] = []
    for row in ours.get("throughput", []):
        goal = {8: 4.0, 16: 25.0}.get(row["clients"])
        if goal is None or not theirs:
            continue
        base = theirs.get(row["clients"], theirs[max(theirs)])
        ratio = row["requests_per_s"] / base
        lines.append(
            (f"throughput at {row['clients']} clients, voicelab / upstream", ratio, f">= {goal:g}", ratio >= goal)
        )
    return lines


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m voicelab bench cosyvoice", description=__doc__)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--code", default="")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--max-chars", type=int, default=200)
    parser.add_argument("--stream-requests", type=int, default=8)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--probe-dtype", default="float16", help="'' to skip the reduced-precision peak probe")
    parser.add_argument("--clients", type=lambda s: [int(c) for c in s.split(",")], default=[1, 2, 4, 8])
    parser.add_argument(
        "--upstream-clients", type=lambda s: [int(c) for c in s.split(",")], default=None,
        help="upstream's client counts, if fewer (its webui queue serves two at once, so more clients only wait)",
    )  # fmt: skip
    parser.add_argument("--stream-chars", type=int, default=200, help="streamed requests' text length (0: as drawn)")
    parser.add_argument("--throughput-requests", type=int, default=8, help="per client count (at least 2 each)")
    parser.add_argument(
        "--anchor-requests", type=int, default=26,
        help="requests per client count in the phase shaped as NVIDIA's Triton+TRT-LLM benchmark (0: skip it)",
    )  # fmt: skip
    parser.add_argument("--anchor-clients", type=lambda s: [int(c) for c in s.split(",")], default=[1, 4])
    parser.add_argument("--skip-upstream", action="store_true")
    parser.add_argument(
        "--upstream-first", action="store_true",
        help="run upstream's side first: a run cut short by a time limit still has both sides' memory",
    )  # fmt: skip
    parser.add_argument("--upstream-requests", type=int, default=0, help="upstream runs the first N only (0: all)")
    parser.add_argument("--side-timeout-s", type=float, default=1800.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--backend-options", default="", help="VoiceLab's side, e.g. decode_slots=8 (continuous batching)"
    )
    return parser


def _probe(args: argparse.Namespace, jobs: list[Job]) -> dict[str, Any] | None:
    if not args.probe_dtype:
        return None
    try:
        return _in_process(run_dtype_probe, args, jobs)
    except SystemExit as exc:  # the soak's figures still stand without the probe
        print(f"{args.probe_dtype} probe: {exc}")
        return None


def _model_version(model_dir: Path) -> int:
    """2 or 3 (imported here: the backend's module brings torch, which the goal lines alone do not need)."""
    from voicelab.backends.cosyvoice.upstream import model_version

    return model_version(model_dir)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        jobs = workload(args.requests, args.max_chars, Path(folder))
        chars = [len(job.text) for job in jobs]
        print(f"workload: {len(jobs)} requests, {min(chars)}-{max(chars)} characters (mean {np.mean(chars):.0f})")
        sides = [("voicelab", run_voicelab)] + ([] if args.skip_upstream else [("upstream (webui)", run_upstream)])
        sides = sides[::-1] if args.upstream_first else sides
        for label, side in sides:
            count = args.upstream_requests if side is run_upstream and args.upstream_requests else len(jobs)
            results[label] = _in_process(side, args, jobs[:count])
            _print_side(label, results[label])
            if args.json:
                args.json.write_text(json.dumps(results, indent=1))
        probe = _probe(args, jobs)
    ours = results["voicelab"]
    for label, rows in _streamed_by_voice(ours["streamed"]).items():
        print(f"voicelab streamed, {label}: " + json.dumps({k: round(v, 3) for k, v in summary(rows).items()}))
    if probe is not None:
        print(f"peak allocated over the first requests: {args.dtype} {ours['probe_peak'] / MIB:.0f} MiB, "
              f"{args.probe_dtype} {probe['probe_peak'] / MIB:.0f} MiB")  # fmt: skip
    if ours.get("anchor"):
        print(anchor_line(ours["anchor"]))
    if probe is not None and probe.get("anchor"):
        print(f"{args.probe_dtype}: " + anchor_line(probe["anchor"]))
    version = _model_version(Path(args.model_dir))
    for line in goal_lines(ours, results.get("upstream (webui)"), probe, (args.dtype, args.probe_dtype), version):
        print(line)
    if args.json:
        args.json.write_text(json.dumps({**results, "probe": probe}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
