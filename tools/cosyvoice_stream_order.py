"""Streamed first audio with a cached voice, by path and by what ran before: where ``bench cosyvoice``'s extra goes.

    python -m tools.cosyvoice_stream_order --model-dir DIR [--code DIR] [--requests 6] [--chars 200]
        [--backend-options decode_slots=16] [--paths inproc,worker] [--auto-clean on|off]

On the H200 (2026-12-02) the same cached voice and texts gave a first audio of 0.235 s (p50) through the engine in
the caller's process, one stream after another, and 0.323 s in ``bench cosyvoice``'s streamed phase, which runs in
the worker process and puts a new voice's request before each cached one. This bench separates the two causes:
for each path (``inproc``: ``EngineCore`` behind ``InprocClient``; ``worker``: the spawned worker behind
``EngineClient``) it runs ``--requests`` cached-voice streams back to back, then as many each preceded by a
new-voice stream, and prints every first audio and the p50 of each cell. Texts and voices are ``bench cosyvoice``'s.
``--auto-clean off`` is the third suspect's A/B: a new voice's request may leave enough cached memory for the clean
between jobs to run, and the next request then maps its memory afresh. ``--trace`` loads the backend through
``traced`` (a "module:factory" the worker imports too), which stamps the runtime's stages and prints one timeline
per request to stderr from whichever process runs it: where the worker's extra lies, stage by stage.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from voicelab.bench.cosyvoice_sides import Job, _request, corpus_cut, engine_flags, engine_settings

ORDERS = ("back to back", "after a new voice")


def streams(jobs: list[Job], count: int, chars: int, after_new_voice: bool) -> list[tuple[Job, bool]]:
    """``count`` cached-voice streams (the first job's prompt) of ``chars``-character texts, each preceded by a
    stream in another job's new voice where ``after_new_voice``; (job, whether its first audio is counted)."""
    cached, order = jobs[0], []
    others = [job for job in jobs[2:] if job.prompt != cached.prompt]  # jobs[1] is the warm-up's other voice
    for index in range(count):
        text = corpus_cut(index, chars)
        if after_new_voice:
            new = others[index % len(others)]
            order.append((replace(new, text=text, seed=1000 + index), False))
        order.append((replace(cached, text=text, seed=index), True))
    return order


def _stamp(name: str, call: Callable[..., Any], marks: list[tuple[str, float]]) -> Callable[..., Any]:
    def stamped(*args: Any, **kwargs: Any) -> Any:
        if name == "start":
            marks.clear()
        marks.append((name, time.perf_counter()))
        return call(*args, **kwargs)

    return stamped


def trace_runtime(runtime: Any, sync: Callable[[], None], say: Callable[[str], None]) -> None:
    """Stamp a loaded runtime: the request's start (its prompt transcript normalised, the backend's first call),
    its inputs, its run, every token, the flow and the vocoder; after the first vocoder call, ``say`` the timeline."""
    from tools.cosyvoice_first_audio import instrument, timeline

    marks: list[tuple[str, float]] = []
    instrument(runtime, marks, sync)
    runtime.normalize_prompt = _stamp("start", runtime.normalize_prompt, marks)
    runtime.inputs = _stamp("inputs", runtime.inputs, marks)
    runtime.run = _stamp("run", runtime.run, marks)
    vocoder = runtime.model.hift.inference

    def first_vocoder(*args: Any, **kwargs: Any) -> Any:
        out = vocoder(*args, **kwargs)
        if marks and marks[0][0] == "start" and sum(name == "vocoder-" for name, _ in marks) == 1:
            start, stamps = marks[0][1], {name: t for name, t in reversed(marks)}
            at = {name: f"{1000 * (stamps[name] - start):.0f}" for name in ("inputs", "run") if name in stamps}
            line = timeline(marks, start, time.perf_counter()).line()
            say(f"trace: inputs at {at.get('inputs', '-')} ms, run at {at.get('run', '-')} ms, {line}")
        return out

    runtime.model.hift.inference = first_vocoder


def trace_backend(backend: Any, sync: Callable[[], None], say: Callable[[str], None]) -> Any:
    """``backend`` (a ``CosyVoiceBackend``) with each runtime it loads stamped by ``trace_runtime``."""
    load = backend.loader

    def loader(*args: Any) -> Any:
        runtime = load(*args)
        trace_runtime(runtime, sync, say)
        return runtime

    backend.loader = loader
    return backend


def traced(settings: Any) -> Any:
    """The CosyVoice backend, traced to stderr (``--trace``; the worker imports this factory by its path)."""
    import sys

    import torch

    from voicelab.backends.cosyvoice.backend import create

    sync = torch.cuda.synchronize if str(settings.device).startswith("cuda") else (lambda: None)
    return trace_backend(create(settings), sync, lambda line: print(line, file=sys.stderr, flush=True))


@contextmanager
def _client(path: str, settings: Any) -> Iterator[Any]:
    if path == "inproc":
        from voicelab.engine.core import EngineCore
        from voicelab.engine.inproc import InprocClient

        client: Any = InprocClient(settings, EngineCore(settings))
    else:
        from voicelab.engine.client import EngineClient

        client = EngineClient(settings)
        client.wait_ready(timeout=900)
    try:
        yield client
    finally:
        client.close()


def measure(path: str, settings: Any, jobs: list[Job], count: int, chars: int,
            say: Callable[[str], None] = print) -> dict[str, list[float]]:  # fmt: skip
    """First audio (s) of each counted stream, per order, through one engine on ``path``."""
    from voicelab.studio import GenerationService

    cells: dict[str, list[float]] = {}
    with _client(path, settings) as client:
        service = GenerationService(client, None, settings)
        for job in jobs[:2]:  # warm-up: the cached voice's features and one other voice
            service.generate(_request(job, stream=True))
        for order in ORDERS:
            firsts = cells.setdefault(order, [])
            for job, counted in streams(jobs, count, chars, order == ORDERS[1]):
                result = service.generate(_request(job, stream=True)).first.result
                if counted:
                    firsts.append(result.first_audio_s)
            say(f"{path}, {order}: first audio " + ", ".join(f"{s:.3f}" for s in firsts)
                + f" s; p50 {statistics.median(firsts):.3f} s")  # fmt: skip
    return cells


def main(argv: list[str] | None = None) -> int:
    from voicelab.bench.cosyvoice import workload

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    engine_flags(parser)
    parser.add_argument("--requests", type=int, default=6, help="counted streams per path and order")
    parser.add_argument("--chars", type=int, default=200)
    parser.add_argument("--trace", action="store_true", help="print each request's stages (CosyVoice's runtime)")
    parser.add_argument("--paths", default="inproc,worker")
    parser.add_argument("--auto-clean", choices=("on", "off"), default="on", help="the clean between jobs (A/B)")
    args = parser.parse_args(argv)
    if args.trace:
        args.backend = "tools.cosyvoice_stream_order:traced"
    settings = engine_settings(args, auto_clean=args.auto_clean == "on")
    jobs = workload(16, args.chars, Path(tempfile.mkdtemp()))  # 11 voices new to the cache
    for path in args.paths.split(","):
        measure(path, settings, jobs, args.requests, args.chars)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
