"""CosyVoice soak and speed: VoiceLab's engine vs upstream driven as its webui does, side by side in one run.

    python -m voicelab bench cosyvoice --model-dir DIR [--code DIR] [--requests 40] [--dtype float32]
        [--max-chars 120] [--stream-requests 8] [--json OUT.json]

The same deterministic workload for both (text of 5 to ``--max-chars`` characters from a fixed corpus, zero-shot
with the four prompts in tests/data, every fifth request a new prompt cut from one of them), each side in its own
spawned process on the same GPU, one after the other. Per side: latency p50/p95, RTF (synthesis s / audio s),
speech tokens/s (audio s * 25), time to first audio, and per window of requests the allocator's allocated,
reserved and inactive-split bytes, NVML memory used by the process, and host RSS. VoiceLab then runs
``--stream-requests`` streamed requests for its streaming time to first audio.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from voicelab.bench.soak import CORPUS, DEFAULT_PROMPTS

TOKENS_PER_S = 25
WINDOW = 10


@dataclass(frozen=True)
class Job:
    text: str
    prompt: str  # a wav path
    transcript: str
    seed: int


@dataclass
class Sample:
    window: int
    allocated: int
    reserved: int
    inactive_split: int
    nvml_used: int
    rss: int


def workload(n: int, max_chars: int, folder: Path, seed: int = 0) -> list[Job]:
    import soundfile as sf

    rng = random.Random(seed)
    bases = sorted(DEFAULT_PROMPTS.glob("*.wav"))[:4]
    jobs = []
    for index in range(n):
        start = rng.randrange(0, len(CORPUS) - max_chars)
        text = CORPUS[start : start + rng.randint(5, max_chars)].strip() or "Hello."
        base = bases[index % len(bases)]
        prompt = str(base)
        if index % 5 == 4:  # a new prompt: a different cut of the clip, so a different voice to the cache
            samples, rate = sf.read(base, dtype="float32")
            prompt = str(folder / f"new_{index}.wav")
            sf.write(prompt, samples[int(rate * 0.05 * (index % 7 + 1)) :], rate)
        jobs.append(Job(text, prompt, base.with_suffix(".txt").read_text().strip(), seed + index))
    return jobs


def _sample(window: int, pid: int, allocated: int, reserved: int, inactive: int) -> Sample:
    import psutil

    return Sample(window, allocated, reserved, inactive, _nvml_used(pid), psutil.Process(pid).memory_info().rss)


def _nvml_used(pid: int) -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return sum(p.usedGpuMemory or 0 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid == pid)
    except Exception:
        return 0


def _torch_sample(window: int, pid: int) -> Sample:
    import torch

    stats = torch.cuda.memory_stats()
    return _sample(
        window,
        pid,
        stats.get("allocated_bytes.all.current", 0),
        stats.get("reserved_bytes.all.current", 0),
        stats.get("inactive_split_bytes.all.current", 0),
    )


def run_upstream(args: argparse.Namespace, jobs: list[Job], conn: Any) -> None:
    import os

    from voicelab.bench.cosyvoice_upstream import load_naive, run_naive

    started = time.perf_counter()
    model = load_naive(Path(args.model_dir), args.code)
    load_s = time.perf_counter() - started
    rows, samples = [], [_torch_sample(0, os.getpid())]
    for index, job in enumerate(jobs):
        audio, latency, first = run_naive(model, job.text, job.transcript, job.prompt, job.seed)
        rows.append((latency, first, len(audio) / 24000))
        if (index + 1) % WINDOW == 0:
            samples.append(_torch_sample((index + 1) // WINDOW, os.getpid()))
    conn.send({"load_s": load_s, "rows": rows, "samples": [asdict(s) for s in samples]})


def _voicelab_request(job: Job, stream: bool) -> Any:
    from voicelab.studio import GenerationRequest, PromptClip

    return GenerationRequest(
        job.text, kind="clone", prompt=PromptClip(job.prompt, job.transcript), seed=job.seed,
        options={"stream": 1.0 if stream else 0.0},
    )  # fmt: skip


def _engine_sample(engine: Any, window: int) -> Sample:
    stats = engine.allocator_stats()
    pid = stats.worker_pid or engine.status().worker_pid
    return _sample(window, pid, stats.allocated, stats.reserved, stats.non_releasable)


def run_voicelab(args: argparse.Namespace, jobs: list[Job], conn: Any) -> None:
    from voicelab.engine.client import EngineClient
    from voicelab.settings import Settings
    from voicelab.studio import GenerationService

    settings = Settings(
        backend="cosyvoice", cosyvoice_dir=args.model_dir, cosyvoice_code=args.code, device="cuda",
        dtype=args.dtype, job_timeout_s=600.0,
    )  # fmt: skip
    started = time.perf_counter()
    with EngineClient(settings) as engine:
        engine.wait_ready(timeout=600)
        load_s = time.perf_counter() - started
        service = GenerationService(engine, None, settings)
        rows, samples = [], [_engine_sample(engine, 0)]
        for index, job in enumerate(jobs):
            result = service.generate(_voicelab_request(job, stream=False)).first.result
            rows.append((result.latency_s, result.first_audio_s, result.duration_s))
            if (index + 1) % WINDOW == 0:
                samples.append(_engine_sample(engine, (index + 1) // WINDOW))
        streamed = []
        for job in jobs[: args.stream_requests]:
            result = service.generate(_voicelab_request(job, stream=True)).first.result
            streamed.append((result.latency_s, result.first_audio_s, result.duration_s))
        peak = engine.allocator_stats().peak_allocated
    conn.send({"load_s": load_s, "rows": rows, "samples": [asdict(s) for s in samples], "streamed": streamed,
               "peak": peak})  # fmt: skip


def _in_process(target: Callable[..., None], args: argparse.Namespace, jobs: list[Job]) -> dict[str, Any]:
    context = mp.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=target, args=(args, jobs, child))
    process.start()
    result: dict[str, Any] = parent.recv()
    process.join()
    return result


def summary(rows: Sequence[tuple[float, float, float]]) -> dict[str, float]:
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
    }


def _print_side(label: str, result: dict[str, Any]) -> None:
    mib = 2**20
    print(
        f"{label}: load {result['load_s']:.1f} s, "
        + json.dumps({k: round(v, 3) for k, v in summary(result["rows"]).items()})
    )
    for s in result["samples"]:
        figures = {k: s[k] / mib for k in ("allocated", "reserved", "inactive_split", "nvml_used", "rss")}
        print(f"  window {s['window']:>2}: " + "  ".join(f"{k} {v:8.1f} MiB" for k, v in figures.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m voicelab bench cosyvoice", description=__doc__)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--code", default="")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--max-chars", type=int, default=120)
    parser.add_argument("--stream-requests", type=int, default=8)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--skip-upstream", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        jobs = workload(args.requests, args.max_chars, Path(folder))
        results = {} if args.skip_upstream else {"upstream (webui)": _in_process(run_upstream, args, jobs)}
        results["voicelab"] = _in_process(run_voicelab, args, jobs)
    for label, result in results.items():
        _print_side(label, result)
    voicelab = results["voicelab"]
    if voicelab.get("streamed"):
        print("voicelab streamed: " + json.dumps({k: round(v, 3) for k, v in summary(voicelab["streamed"]).items()}))
    print(f"voicelab peak allocated: {voicelab['peak'] / 2**20:.1f} MiB ({args.dtype})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
