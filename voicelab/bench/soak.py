"""Soak benchmark: many varied requests in one worker, memory and latency per window, managed vs naive.

    python -m voicelab bench soak --requests 500 [--device cuda] [--naive] [--prompts DIR]

Each mode runs in its own spawned process (so one cannot pollute the other's memory) on the same
deterministic workload: text of 1-400 characters and, on every other request, one of at least four prompt
voices. ``--naive`` adds a second run that behaves like the seed WebUIs: gradients enabled (no inference mode),
PyTorch's default allocator, no cleaning between jobs, and a per-upload embedding dict that is never pruned.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class SoakRequest:
    text: str
    prompt_index: int | None


@dataclass(frozen=True)
class Window:
    """Figures for one window of requests; memory is read at the window's end."""

    end: int
    p50_s: float
    p95_s: float
    allocated: int
    reserved: int
    fragmentation: float
    nvml_used: int | None
    rss: int


def workload(n: int, prompts: int, seed: int = 0, max_chars: int = 400, prompt_every: int = 2) -> list[SoakRequest]:
    """Deterministic requests: text of 1..max_chars characters, a prompt voice on every ``prompt_every``-th."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        length = rng.randint(1, max_chars)
        start = rng.randrange(0, len(CORPUS) - length)
        text = CORPUS[start : start + length].strip() or "Hi."
        with_prompt = prompt_every > 0 and i % prompt_every == prompt_every - 1
        out.append(SoakRequest(text, (i // prompt_every) % prompts if with_prompt else None))
    return out


def _nvml_used_by(nvml: Any, pid: int) -> int | None:
    """NVML memory of this process (the device's used memory if NVML does not list it); None without NVML."""
    figures = nvml.sample([pid])
    if figures is None:
        return None
    used = figures.used_by(pid)
    return figures.used if used is None else used


def _naive_core(core: Any) -> Any:
    """Turn a managed core into what the seed apps do (see module docstring)."""
    import torch

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
    model = getattr(core.backend, "_model", None)
    if model is not None:
        model.requires_grad_(True)  # checkpoints loaded for training keep requires_grad=True
    core.voice = NaiveVoiceStage(core.device)
    core.hygiene = HygienePolicy(enabled=False)  # no cleaning between jobs
    return core


def _run_mode(naive: bool, args: argparse.Namespace, conn: Any) -> None:
    if naive:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    else:
        from voicelab.engine.memory import configure_allocator

        configure_allocator(os.environ)
    import numpy as np
    import psutil

    from voicelab.engine import memory
    from voicelab.engine.core import EngineCore
    from voicelab.engine.inproc import InprocClient
    from voicelab.settings import Settings
    from voicelab.studio import GenerationRequest, GenerationService
    from voicelab.telemetry.nvml import NvmlSampler
    from voicelab.voice.intake import load_prompt

    nvml = NvmlSampler()

    settings = Settings(device=args.device, dtype=args.dtype, voice_path=args.voice, job_timeout_s=1e9)
    core = EngineCore(settings)
    if naive:
        core = _naive_core(core)
    service = GenerationService(InprocClient(settings, core), None, settings)  # the path every front end takes
    prompts = [load_prompt(path) for path in sorted(Path(args.prompts).glob("*.wav"))][: args.voices]
    if len(prompts) < 4:
        raise SystemExit(f"the soak needs at least 4 prompt voices in {args.prompts}, found {len(prompts)}")
    latencies: list[float] = []
    windows: list[Window] = []
    for index, item in enumerate(
        workload(args.requests, len(prompts), args.seed, args.max_chars, args.prompt_every), start=1
    ):
        request = GenerationRequest(
            item.text, seed=index, prompt=None if item.prompt_index is None else prompts[item.prompt_index]
        )
        started = time.perf_counter()
        service.generate(request)  # results come back on the host: the device work is finished
        latencies.append(time.perf_counter() - started)
        if index % args.window == 0 or index == args.requests:
            stats = memory.allocator_stats(core.device)
            recent = latencies[-args.window :]
            windows.append(
                Window(
                    end=index,
                    p50_s=float(np.percentile(recent, 50)),
                    p95_s=float(np.percentile(recent, 95)),
                    allocated=stats.allocated,
                    reserved=stats.reserved,
                    fragmentation=stats.fragmentation,
                    nvml_used=_nvml_used_by(nvml, os.getpid()),
                    rss=psutil.Process().memory_info().rss,
                )
            )
            conn.send(("window", windows[-1]))
    conn.send(("done", None))


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.1f}"


def _print_windows(label: str, windows: Sequence[Window]) -> None:
    print(f"\n{label}")
    print(
        f"{'requests':>8} {'p50 s':>7} {'p95 s':>7} {'alloc MiB':>10} {'reserved MiB':>12} {'frag':>6} "
        f"{'NVML MiB':>9} {'RSS MiB':>8}"
    )
    for w in windows:
        print(
            f"{w.end:>8} {w.p50_s:>7.3f} {w.p95_s:>7.3f} {_mib(w.allocated):>10} {_mib(w.reserved):>12} "
            f"{w.fragmentation:>6.2f} {_mib(w.nvml_used):>9} {_mib(w.rss):>8}"
        )


def _run_in_process(naive: bool, args: argparse.Namespace) -> list[Window]:
    context = mp.get_context("spawn")
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_run_mode, args=(naive, args, child), daemon=True)
    process.start()
    child.close()
    windows: list[Window] = []
    label = "naive" if naive else "managed"
    print(f"running {args.requests} requests, {label} ...", flush=True)
    while True:
        try:
            kind, payload = parent.recv()
        except EOFError:
            break
        if kind == "done":
            break
        windows.append(payload)
        print(
            f"  {label}: {payload.end}/{args.requests}  p50 {payload.p50_s:.3f}s  p95 {payload.p95_s:.3f}s  "
            f"alloc {_mib(payload.allocated)} MiB  reserved {_mib(payload.reserved)} MiB  RSS {_mib(payload.rss)} MiB",
            flush=True,
        )
    process.join()
    if process.exitcode:
        raise SystemExit(f"the {label} run failed (exit code {process.exitcode})")
    return windows


def _run_modes(args: argparse.Namespace) -> dict[str, list[Window]]:
    """Managed, then naive (or both at once with --parallel: same machine load for both)."""
    modes = {"managed": False, **({"naive": True} if args.naive else {})}
    if not args.parallel:
        return {label: _run_in_process(naive, args) for label, naive in modes.items()}
    with ThreadPoolExecutor(len(modes)) as pool:
        futures = {label: pool.submit(_run_in_process, naive, args) for label, naive in modes.items()}
        return {label: future.result() for label, future in futures.items()}


def summary(label: str, windows: Sequence[Window]) -> dict[str, str]:
    first, last = windows[0], windows[-1]
    return {
        "mode": label,
        "p95 first→last": f"{first.p95_s:.3f} → {last.p95_s:.3f} s (x{last.p95_s / first.p95_s:.2f})",
        "allocated first→last": f"{_mib(first.allocated)} → {_mib(last.allocated)} MiB "
        f"({(last.allocated - first.allocated) / 2**20:+.2f})",
        "reserved first→last (max)": f"{_mib(first.reserved)} → {_mib(last.reserved)} MiB "
        f"(max {_mib(max(w.reserved for w in windows))})",
        "NVML used first→last": f"{_mib(first.nvml_used)} → {_mib(last.nvml_used)} MiB",
        "RSS first→last": f"{_mib(first.rss)} → {_mib(last.rss)} MiB",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m voicelab bench soak", description=__doc__)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--voice", default="", help="Piper voice file (default: the built-in voice)")
    parser.add_argument("--prompts", default=str(DEFAULT_PROMPTS), help="folder of prompt clips (*.wav, ≥ 4)")
    parser.add_argument("--voices", type=int, default=4)
    parser.add_argument("--naive", action="store_true", help="also run the naive mode and compare")
    parser.add_argument("--window", type=int, default=WINDOW)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-chars", type=int, default=400, help="longest text in the mix")
    parser.add_argument("--prompt-every", type=int, default=2, help="a prompt voice on every N-th request (0: none)")
    parser.add_argument("--parallel", action="store_true", help="run managed and naive at the same time")
    args = parser.parse_args(argv)
    if args.requests < 2 * args.window:
        parser.error(f"--requests must be at least {2 * args.window} to compare the first and last window")
    results = _run_modes(args)
    for label, windows in results.items():
        _print_windows(label, windows)
    print("\nfirst 50 vs last 50")
    for label, windows in results.items():
        for key, value in summary(label, windows).items():
            print(f"  {key:<28} {value}")
        print()
    managed = results["managed"]
    growth = (managed[-1].allocated - managed[0].allocated) / 2**20
    print(f"managed allocated growth after warm-up: {growth:+.2f} MiB")
    print(f"managed p95 last/first: {managed[-1].p95_s / managed[0].p95_s:.2f}")
    return 0
