"""Soak benchmark: many varied requests in one worker, memory and latency per window, managed vs naive.

    python -m voicelab bench soak --requests 500 --naive [--device cuda] [--parallel] [--prompts DIR]

Each mode runs in its own spawned process (so one cannot pollute the other's memory) on the same
deterministic workload: text of 1-400 characters, every length once before any repeats (so 400 distinct
lengths in 500 requests) and, on every other request, one of at least four prompt voices. Then one long job
(``--long-chars``, 3,000 by default) and Clean cache. ``--naive`` adds a control that behaves like the seed
WebUIs: gradients enabled (no inference mode), PyTorch's default allocator, no cleaning between jobs, a
per-upload embedding dict that is never pruned, and on the host no heap trimming, glibc's default arenas and
unbounded sentence batches. The pass/fail lines judge the managed run; the naive one is shown beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from voicelab.bench.soak_report import SoakResult, TimedRequest, Window, print_report

# CosyVoice's soak and throughput are one run beside upstream's webui (``bench cosyvoice``), not these benchmarks'
COSYVOICE_ELSEWHERE = (
    "CosyVoice's soak and throughput run side by side with upstream in one command: python -m voicelab bench "
    "cosyvoice --model-dir DIR --code UPSTREAM_CHECKOUT (its flags: python -m voicelab bench cosyvoice --help)"
)

CORPUS = (
    "The old lighthouse keeper climbed the spiral stairs every evening at dusk. "
    "Rain drummed on the tin roof while the kettle began to sing. "
    "Could you tell me the way to the railway station, please? "
    "In 1969, twelve people walked on the moon; the last did so in 1972. "
    "She laughed, shook her head, and said nothing at all. "
    "Fresh bread, ripe tomatoes and a little olive oil make a perfect lunch. "
    "Why does the river always sound louder at night? "
    "The committee will meet again on Thursday at half past three. "
    "Wind turbines turned slowly on the ridge above the valley. "
    "Please remember to water the plants while I am away."
)
WINDOW = 50
DEFAULT_PROMPTS = Path(__file__).resolve().parents[2] / "tests" / "data"


def base_prompts(count: int = 4) -> list[Path]:
    """The first ``count`` test prompts by name: the clips the CosyVoice benches and tools cut new voices from."""
    return sorted(DEFAULT_PROMPTS.glob("*.wav"))[:count]


@dataclass(frozen=True)
class SoakRequest:
    text: str
    prompt_index: int | None


def workload(
    n: int, prompts: int, seed: int = 0, max_chars: int = 400, prompt_every: int = 2, ramp: bool = False
) -> list[SoakRequest]:
    """Deterministic requests: every length in 1..max_chars once (shuffled) before any repeats.

    ``ramp`` sorts the lengths shortest first: each request is longer than the last, the worst case for a
    heap that keeps its high-water mark. A prompt voice goes with every ``prompt_every``-th request.
    """
    rng = random.Random(seed)
    lengths: list[int] = []
    while len(lengths) < n:
        block = list(range(1, max_chars + 1))
        rng.shuffle(block)
        lengths.extend(block)
    lengths = sorted(lengths[:n]) if ramp else lengths[:n]
    out = []
    for i, length in enumerate(lengths):
        start = rng.randrange(0, max(len(CORPUS) - length, 1))
        text = CORPUS[start : start + length].strip() or "Hi."
        with_prompt = prompt_every > 0 and i % prompt_every == prompt_every - 1
        out.append(SoakRequest(text, (i // prompt_every) % prompts if with_prompt else None))
    return out


def long_text(chars: int) -> str:
    """``chars`` characters of the corpus (repeated), cut at a word."""
    text = (CORPUS + " ") * (chars // len(CORPUS) + 1)
    return text[:chars].rsplit(" ", 1)[0]


def _nvml_used_by(nvml: Any, pid: int) -> int | None:
    """NVML memory of this process (the device's used memory if NVML does not list it); None without NVML."""
    figures = nvml.sample([pid])
    if figures is None:
        return None
    used = figures.used_by(pid)
    return figures.used if used is None else used


def peak_rss_since_reset() -> int | None:
    """Peak RSS (VmHWM) since the last ``reset_peak_rss``, in bytes; None where /proc has no such line."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def reset_peak_rss() -> None:
    """Start a new peak-RSS window (Linux: writing 5 to clear_refs resets VmHWM)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _naive_core(core: Any) -> Any:
    """Turn a managed core into what the seed apps do (see module docstring)."""
    import torch

    from voicelab.backends.batching import BatchPolicy
    from voicelab.engine.heap import HeapPolicy
    from voicelab.engine.memory import HygienePolicy
    from voicelab.engine.voicing import VoiceStage

    class NaiveVoiceStage(VoiceStage):
        def __init__(self, device: str) -> None:
            super().__init__(device, cache_capacity=10**9)
            self.uploads: dict[str, Any] = {}  # one entry per upload, never pruned
            self.count = 0

        def voice_for(self, prompt: Any, languages: Any, calibrate: Any) -> Any:
            cached = super().voice_for(prompt, languages, calibrate)  # matched once per voice, as the managed run
            self.count += 1
            self.uploads[f"/tmp/gradio/upload-{self.count}.wav"] = self.matcher.encoder.embed(prompt.samples)
            return cached

    core.grad_mode = torch.enable_grad
    voices = getattr(core.backend, "voices", {"": core.backend})
    for voice in voices.values():
        model = getattr(voice, "_model", None)
        if model is not None:
            model.requires_grad_(True)  # checkpoints loaded for training keep requires_grad=True
        for holder in (voice, getattr(voice, "voice", voice)):
            if hasattr(holder, "batch_policy"):
                holder.batch_policy = BatchPolicy(max_piece_ids=10**9)  # a long sentence is one batch
    core.voice = NaiveVoiceStage(core.device)
    core.hygiene = HygienePolicy(enabled=False)  # no cleaning between jobs
    core.heap_policy = HeapPolicy(arena_max=0, trim_after_job=False)
    return core


@dataclass
class _Run:
    """What one mode's process needs to measure its windows."""

    client: Any
    device: str
    nvml: Any
    requests: list[TimedRequest] = field(default_factory=list)


def _window(run: _Run, end: int, size: int) -> Window:
    import numpy as np

    stats = run.client.allocator_stats()  # queued behind the job's after-job hygiene: RSS after it
    recent = [r.seconds for r in run.requests[-size:]]
    return Window(
        end=end,
        p50_s=float(np.percentile(recent, 50)),
        p95_s=float(np.percentile(recent, 95)),
        allocated=stats.allocated,
        reserved=stats.reserved,
        fragmentation=stats.fragmentation,
        nvml_used=_nvml_used_by(run.nvml, os.getpid()),
        rss=stats.worker_rss,
    )


def _run_mode(naive: bool, args: argparse.Namespace, conn: Any) -> None:
    if naive:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        os.environ["MALLOC_ARENA_MAX"] = "0"  # glibc's default arenas: the core leaves a user's setting alone
        os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = "1024"  # oneDNN's default capacity, likewise
    else:
        from voicelab.engine.memory import configure_allocator

        configure_allocator(os.environ)  # the core caps glibc's arenas itself (engine/heap.py)
    from voicelab.engine.core import EngineCore
    from voicelab.engine.inproc import InprocClient
    from voicelab.settings import Settings
    from voicelab.studio import GenerationRequest, GenerationService
    from voicelab.telemetry.nvml import NvmlSampler
    from voicelab.voice.intake import load_prompt

    settings = Settings(
        backend=args.backend, device=args.device, dtype=args.dtype, voice_path=args.voice, job_timeout_s=1e9
    )
    core = EngineCore(settings)
    if naive:
        core = _naive_core(core)
    client = InprocClient(settings, core)
    service = GenerationService(client, None, settings)  # the path every front end takes
    prompts = [load_prompt(path) for path in sorted(Path(args.prompts).glob("*.wav"))][: args.voices]
    if args.prompt_every and len(prompts) < 4:
        raise SystemExit(f"the soak needs at least 4 prompt voices in {args.prompts}, found {len(prompts)}")
    run = _Run(client, core.device, NvmlSampler())
    items = workload(args.requests, max(len(prompts), 1), args.seed, args.max_chars, args.prompt_every, args.ramp)
    conn.send(("lengths", len({len(item.text) for item in items})))
    for index, item in enumerate(items, start=1):
        prompt = None if item.prompt_index is None else prompts[item.prompt_index]
        started = time.perf_counter()
        service.generate(GenerationRequest(item.text, seed=index, prompt=prompt))  # results are on the host
        seconds = time.perf_counter() - started
        run.requests.append(TimedRequest(index, len(item.text), prompt is not None, seconds))
        if index % args.window == 0 or index == args.requests:
            conn.send(("window", _window(run, index, args.window)))
    if args.long_chars and (args.naive_long or not naive):
        _long_job(run, service, args.long_chars, clean=not naive, conn=conn)
    client.close()
    conn.send(("requests", run.requests))
    conn.send(("done", None))


def _long_job(run: _Run, service: Any, chars: int, clean: bool, conn: Any) -> None:
    """One long job, its peak RSS, then Clean cache (the naive control has none: the seed apps had none)."""
    from voicelab.studio import GenerationRequest

    reset_peak_rss()
    started = time.perf_counter()
    service.generate(GenerationRequest(long_text(chars), seed=1))
    seconds = time.perf_counter() - started
    after_job = run.client.allocator_stats().worker_rss
    after_clean = run.client.clean_cache(False).after.worker_rss if clean else None
    conn.send(("long", (chars, seconds, peak_rss_since_reset(), after_job, after_clean)))


def _run_in_process(naive: bool, args: argparse.Namespace) -> SoakResult:
    context = mp.get_context("spawn")
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_run_mode, args=(naive, args, child), daemon=True)
    process.start()
    child.close()
    label = "naive" if naive else "managed"
    result = SoakResult(label)
    print(f"running {args.requests} requests, {label} ...", flush=True)
    while True:
        try:
            kind, payload = parent.recv()
        except EOFError:
            break
        if kind == "done":
            break
        if kind == "lengths":
            result.distinct_lengths = payload
        elif kind == "requests":
            result.requests = payload
        elif kind == "long":
            result.long_chars, result.long_s, result.long_peak_rss, result.long_rss, result.clean_rss = payload
        else:
            result.windows.append(payload)
            print(f"  {label}: {payload.end}/{args.requests}  {payload.progress()}", flush=True)
    process.join()
    if process.exitcode:
        raise SystemExit(f"the {label} run failed (exit code {process.exitcode})")
    return result


def run_soak(args: argparse.Namespace) -> dict[str, SoakResult]:
    """Managed, then naive (or both at once with --parallel: the same machine load for both)."""
    modes = {"managed": False, **({"naive": True} if args.naive else {})}
    if not args.parallel:
        return {label: _run_in_process(naive, args) for label, naive in modes.items()}
    with ThreadPoolExecutor(len(modes)) as pool:
        futures = {label: pool.submit(_run_in_process, naive, args) for label, naive in modes.items()}
        return {label: future.result() for label, future in futures.items()}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m voicelab bench soak", description=__doc__)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--voice", default="", help="Piper voice file (default: the built-in voice)")
    parser.add_argument("--backend", default="builtin", help="builtin (English + Mandarin) or piper (English alone)")
    parser.add_argument("--prompts", default=str(DEFAULT_PROMPTS), help="folder of prompt clips (*.wav, ≥ 4)")
    parser.add_argument("--voices", type=int, default=4)
    parser.add_argument("--naive", action="store_true", help="also run the naive control and show it beside")
    parser.add_argument("--window", type=int, default=WINDOW)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-chars", type=int, default=400, help="longest text in the mix")
    parser.add_argument("--prompt-every", type=int, default=2, help="a prompt voice on every N-th request (0: none)")
    parser.add_argument("--ramp", action="store_true", help="lengths shortest first (worst case for a heap)")
    parser.add_argument("--long-chars", type=int, default=3000, help="the long job after the soak (0: none)")
    parser.add_argument(
        "--naive-long", action=argparse.BooleanOptionalAction, default=True, help="the naive control's long job too"
    )
    parser.add_argument("--rss-ratio", type=float, default=1.10, help="goal: RSS last window ÷ first")
    parser.add_argument("--rss-growth-mib", type=float, default=150.0, help="goal: RSS growth after warm-up")
    parser.add_argument("--p95-ratio", type=float, default=1.10, help="goal: p95 latency last window ÷ first")
    parser.add_argument("--parallel", action="store_true", help="run managed and naive at the same time")
    args = parser.parse_args(argv)
    if args.backend == "cosyvoice":
        parser.error(COSYVOICE_ELSEWHERE)
    if args.requests < 2 * args.window:
        parser.error(f"--requests must be at least {2 * args.window} to compare the first and last window")
    return args


def main(argv: list[str] | None = None) -> int:
    """Exit status 1 when the managed run misses a goal."""
    args = parse_args(argv)
    results = run_soak(args)
    verdicts = print_report(results, args)
    return 0 if all(v.passed for v in verdicts if v.mode == "managed") else 1
