"""Where a cached cloned request's time goes on one device, stage by stage.

    python -m tools.clone_stages [--device cuda] [--renderer pulse] [--runs 20] [--repeat 1,3]

A cloned request on the built-in voices is plain synthesis, the voice renderer, then the scoring users see: the
output and the unmatched draft resampled to 16 kHz once, GE2E's host preparation (volume, silence trimming) and
its LSTM, the ECAPA judge, and YIN's median F0 of the output. Each stage is timed alone with the device
synchronised, ``--runs`` times on the lighthouse sentence of ``bench renderers`` said ``--repeat`` times (about
10.7 s per repeat), after two warm-up rounds; the table gives p50 and p95 per stage in milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Sequence

import torch

from voicelab.bench.first_byte import nearest_rank
from voicelab.bench.renderers import MATCH, TEXT, timed_on
from voicelab.judges.ecapa import EcapaJudge
from voicelab.voice.analysis import resample
from voicelab.voice.dsp import apply_transform
from voicelab.voice.encoder import SAMPLE_RATE, SpeakerEncoder, normalize_volume, trim_long_silences
from voicelab.voice.matcher import median_f0_many

WARMUP = 2


def stages(device: str, renderer: str, text: str) -> dict[str, Callable[[], object]]:
    """Each stage of a cloned request as a call that repeats it on the same input."""
    from voicelab.eval.voices import builtin_torch_synthesizer

    synthesize = builtin_torch_synthesizer(device)
    draft, sr = synthesize("en", text)
    output = apply_transform(draft, sr, MATCH, device, renderer)
    pieces = [resample(output, sr, SAMPLE_RATE), resample(draft, sr, SAMPLE_RATE)]
    encoder, judge = SpeakerEncoder(device), EcapaJudge(device)
    return {
        "synthesis": lambda: synthesize("en", text),
        f"renderer ({renderer})": lambda: apply_transform(draft, sr, MATCH, device, renderer),
        "resample both to 16 kHz (host)": lambda: [resample(p, sr, SAMPLE_RATE) for p in (output, draft)],
        "GE2E preparation (host)": lambda: [trim_long_silences(normalize_volume(p)) for p in pieces],
        "GE2E embedding, both": lambda: encoder.embed_batch(pieces),
        "ECAPA embedding, both": lambda: judge.embed_batch(pieces, SAMPLE_RATE),
        "median F0 of the output": lambda: median_f0_many([output], sr, device),
    }


def measure(device: str, renderer: str, text: str, runs: int) -> list[tuple[str, list[float]]]:
    steps = stages(device, renderer, text)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for run in range(WARMUP + runs):
        for name, step in steps.items():
            _, seconds = timed_on(device, step)
            if run >= WARMUP:
                times[name].append(seconds)
    return list(times.items())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.clone_stages", description=__doc__.split("\n\n")[1])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--renderer", default="pulse")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--repeat", default="1,3", help="comma-separated: how many times the sentence is said")
    args = parser.parse_args(argv)
    for repeat in (int(r) for r in args.repeat.split(",")):
        rows = measure(args.device, args.renderer, " ".join([TEXT] * repeat), args.runs)
        print(f"\n{args.device}, the sentence said {repeat}x, {args.runs} runs")
        print("| stage | p50 ms | p95 ms |\n|---|---|---|")
        for name, seconds in rows:
            print(f"| {name} | {1e3 * statistics.median(seconds):.1f} | {1e3 * nearest_rank(seconds, 0.95):.1f} |")
        total = sum(statistics.median(seconds) for _, seconds in rows)
        print(f"| sum of the p50s | {1e3 * total:.1f} | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
