"""Where a cached cloned request's host time goes, end to end in one engine, by cProfile.

    python -m tools.clone_profile [--device cuda] [--runs 20] [--top 40]

``clone_stages`` times each stage alone; this runs whole requests through ``EngineCore`` in this process (the
throughput bench's two-sentence texts and its prompt, after warm-up), prints plain and cloned latencies with their
chunk counts, then profiles ``--runs`` cloned requests. On a GPU, time the host spends waiting for the device shows
at the calls that read results back (``.cpu()``, ``.tolist()``), and a launch-bound stage shows as its own time.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import io
import pstats
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import replace

import torch

from voicelab.bench.first_byte import nearest_rank
from voicelab.bench.renderers import timed_on
from voicelab.bench.throughput import DEFAULT_PROMPT, request_text
from voicelab.engine.core import EngineCore
from voicelab.engine.messages import SynthesisRequest
from voicelab.settings import from_environment
from voicelab.voice.intake import load_prompt
from voicelab.voice.prompt import PromptAudio


def timed_requests(core: EngineCore, prompt: PromptAudio | None, runs: int) -> str:
    """``runs`` requests, each timed with the device synchronised: a line of p50 / p95 / max and chunk counts."""
    times, chunks = [], set()
    for r in range(runs):
        request = SynthesisRequest(request_text(0, r, 2), seed=r, prompt=prompt)
        result, seconds = timed_on(core.device, functools.partial(core.run, request))
        times.append(1e3 * seconds)
        chunks.add(result.chunks)
    p50, p95 = statistics.median(times), nearest_rank(times, 0.95)
    return f"p50 {p50:.1f} ms, p95 {p95:.1f}, max {max(times):.1f}; chunks per request {sorted(chunks)}"


def clone_tool_parser(prog: str, doc: str) -> argparse.ArgumentParser:
    """The clone tools' shared arguments: the device and the requests timed."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[1])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--runs", type=int, default=20)
    return parser


@contextlib.contextmanager
def warmed_engine(device: str) -> Iterator[tuple[EngineCore, PromptAudio]]:
    """An engine on ``device`` and the throughput bench's prompt, warmed as both clone tools measure it: the
    prompt's profile, the allocator, each graph bucket's second use (plain and cloned requests, twice); the engine
    is closed afterwards, a failed warm-up included."""
    core = EngineCore(replace(from_environment(), device=device))
    try:
        prompt = load_prompt(DEFAULT_PROMPT)
        for voice in (None, prompt, None, prompt):
            timed_requests(core, voice, 4)
        yield core, prompt
    finally:
        core.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = clone_tool_parser("python -m tools.clone_profile", __doc__)
    parser.add_argument("--top", type=int, default=40, help="rows of the profile, by cumulative and by own time")
    args = parser.parse_args(argv)
    with warmed_engine(args.device) as (core, prompt):
        print(f"{args.device}, renderer {core.voice.renderer}, {args.runs} requests of two sentences each")
        print("plain:  " + timed_requests(core, None, args.runs))
        print("cloned: " + timed_requests(core, prompt, args.runs))
        profile = cProfile.Profile()
        profile.runcall(timed_requests, core, prompt, args.runs)
        out = io.StringIO()
        stats = pstats.Stats(profile, stream=out)
        stats.sort_stats("cumulative").print_stats(args.top)
        stats.sort_stats("tottime").print_stats(args.top)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
