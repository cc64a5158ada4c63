"""Where the CosyVoice worker's host memory grows: RSS and Python's own allocations per phase of requests.

    python -m tools.cosyvoice_host_memory --model-dir DIR [--code DIR] [--phase 30] [--no-scores]

The engine in this process (``EngineCore`` behind ``InprocClient``, the path every front end takes), zero-shot
requests after a warm-up of ten (``--warmup``), in three phases: the same request again and again (a leak per
call), new texts in one voice (caches per text length), new prompts (state per voice); ``--phases`` picks some. Each
phase prints its RSS growth per call, what tracemalloc saw Python allocate (the rest is native), the mappings whose
RSS grew most (``tools.memory_map``: heap, anonymous, each library), glibc's bytes in use, the thread count, and
the largest Python growth by traceback.
``--no-scores`` skips the similarity score and pitch of each output (upstream's process does neither): an A/B.
``--llm-threads pooled`` runs each request's ``llm_job`` on reused threads instead of a new thread per request
(``speech_loop.PooledThreads``): the next A/B, since neither the scores nor the flow graphs were the cause on the
H200 (12-02) and the identical request grew ~1 MiB per call there. Backend settings (``fast_decode=off``: upstream's
own token loop; ``decode_slots=1``: no batcher thread) go through ``--backend-options``.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Any

MIB = 2**20


PHASES = {"same": "same request", "texts": "new texts, one voice", "prompts": "new prompts"}


def phases(jobs: list[Any], size: int, keys: tuple[str, ...] = tuple(PHASES), warmup: int = 10) -> dict[str, list[Any]]:
    """The phases named by ``keys`` over the workload after its first ``warmup`` jobs: one request, one voice,
    new voices."""
    base, rest = jobs[0], jobs[warmup:]
    one_voice = [replace(job, prompt=base.prompt, transcript=base.transcript) for job in rest]
    every = {
        "same": [base] * size,
        "texts": one_voice[:size],
        "prompts": [job for job in rest if job.prompt != base.prompt][:size],
    }
    return {PHASES[key]: every[key] for key in keys}


def _phase(name: str, items: list[Any], generate: Any) -> None:
    from tools.memory_map import growth_lines, read_map
    from voicelab.engine.heap import free_heap_bytes, process_rss

    gc.collect()
    mapped, rss, before, started = read_map(), process_rss(), tracemalloc.take_snapshot(), time.perf_counter()
    for job in items:
        generate(job)
    gc.collect()
    mapped_after, rss_after, after = read_map(), process_rss(), tracemalloc.take_snapshot()  # in the order above
    traced = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    print(
        f"{name}: {len(items)} requests in {time.perf_counter() - started:.0f} s; RSS {rss / MIB:.1f} -> "
        f"{rss_after / MIB:.1f} MiB ({(rss_after - rss) / MIB / max(len(items), 1):+.2f} MiB per call); Python "
        f"{traced / MIB:+.2f} MiB; glibc free {(free_heap_bytes() or 0) / MIB:.0f} MiB",
        flush=True,
    )
    for line in growth_lines(mapped, mapped_after, len(items)):
        print(line)
    for stat in after.compare_to(before, "traceback")[:5]:
        if stat.size_diff > 64 * 1024:
            frames = " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in stat.traceback[:6])
            print(f"   {stat.size_diff / 1024:+.0f} KiB {stat.count_diff:+d} blocks {frames}")


def main(argv: list[str] | None = None) -> int:
    from voicelab.bench.cosyvoice import workload
    from voicelab.bench.cosyvoice_sides import _request, engine_flags, engine_settings
    from voicelab.engine.core import EngineCore
    from voicelab.engine.inproc import InprocClient
    from voicelab.studio import GenerationService

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    engine_flags(parser)
    parser.add_argument("--phase", type=int, default=30, help="requests per phase")
    parser.add_argument("--no-scores", action="store_true", help="no similarity or pitch of the outputs")
    parser.add_argument("--llm-threads", choices=("new", "pooled"), default="new", help="per request, or reused")
    parser.add_argument("--phases", default=",".join(PHASES), help="which of " + ", ".join(PHASES))
    parser.add_argument("--warmup", type=int, default=10, help="requests before the phases (at least 1)")
    args = parser.parse_args(argv)
    keys = tuple(key.strip() for key in args.phases.split(",") if key.strip())
    if unknown := [key for key in keys if key not in PHASES]:
        parser.error(f"unknown phase {unknown[0]!r}; choose from " + ", ".join(PHASES))
    settings = engine_settings(args)
    core = EngineCore(settings)
    if args.no_scores:
        core.voice.scores_many = lambda finished, rate: [None] * len(finished)  # type: ignore[method-assign]
        core.voice.scores = lambda *_args, **_kwargs: None  # type: ignore[method-assign]
    if args.llm_threads == "pooled":  # the core has loaded the backend
        from voicelab.backends.cosyvoice.speech_loop import PooledThreads

        core.backend.runtime.llm_threads = PooledThreads(16)  # type: ignore[attr-defined]
    client = InprocClient(settings, core)
    service = GenerationService(client, None, settings)
    warmup = max(1, args.warmup)
    jobs = workload(3 * args.phase + warmup, 200, Path(tempfile.mkdtemp()))

    def generate(job: Any) -> None:
        service.generate(_request(job, stream=False))

    for job in jobs[:warmup]:
        generate(job)
    tracemalloc.start(8)
    try:
        for name, items in phases(jobs, args.phase, keys, warmup).items():
            _phase(name, items, generate)
    finally:
        tracemalloc.stop()  # it slows every allocation after it: a caller in the same process must not pay for it
        client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
