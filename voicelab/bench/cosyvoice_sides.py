"""The two sides of ``bench cosyvoice``, each run in its own spawned process: upstream driven as its webui does,
and VoiceLab's worker engine. Both send back plain dicts (rows, memory samples, throughput) through a pipe."""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

WINDOW = 10
WEBUI_CONCURRENCY = 2  # upstream webui.py: demo.queue(max_size=4, default_concurrency_limit=2)
PROBE_REQUESTS = 8  # the requests the dtype probe and its float32 counterpart both run


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


def nvml_used(pid: int) -> int:
    """GPU memory NVML charges to one process (what nvidia-smi shows), 0 where NVML cannot tell."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return sum(p.usedGpuMemory or 0 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid == pid)
    except Exception:
        return 0


def _sample(window: int, pid: int, allocated: int, reserved: int, inactive: int) -> Sample:
    import psutil

    return Sample(window, allocated, reserved, inactive, nvml_used(pid), psutil.Process(pid).memory_info().rss)


def _torch_sample(window: int) -> Sample:
    import torch

    stats = torch.cuda.memory_stats()
    return _sample(
        window,
        os.getpid(),
        stats.get("allocated_bytes.all.current", 0),
        stats.get("reserved_bytes.all.current", 0),
        stats.get("inactive_split_bytes.all.current", 0),
    )


def throughput(call: Callable[[Job], float], jobs: Sequence[Job], clients: int, limit: int | None) -> dict[str, float]:
    """``clients`` threads send ``jobs`` as fast as answers come; ``limit`` caps how many run at once (the webui's
    queue: beyond it a client waits, where the real webui would refuse a client once 4 are waiting)."""
    gate = threading.Semaphore(limit or clients)
    latencies: list[float] = []

    def one(job: Job) -> float:
        with gate:
            started = time.perf_counter()
            audio_s = call(job)
            latencies.append(time.perf_counter() - started)
            return audio_s

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        audio = sum(pool.map(one, jobs))
    wall = time.perf_counter() - started
    return {
        "clients": clients,
        "requests": len(jobs),
        "wall_s": wall,
        "requests_per_s": len(jobs) / wall,
        "audio_s_per_s": audio / wall,
        "p50_s": float(np.percentile(latencies, 50)),
    }


def _say_window(side: str, done: int, total: int, sample: Sample) -> None:
    """A window's memory as the side goes: a run cut short by its time limit still tells it."""
    print(f"  {side}: {done} of {total} requests; allocated {sample.allocated / 2**20:.1f}, "
          f"reserved {sample.reserved / 2**20:.0f}, rss {sample.rss / 2**20:.0f} MiB", flush=True)  # fmt: skip


def _throughputs(
    side: str,
    call: Callable[[Job], float],
    counts: Sequence[int],
    per_count: int,
    jobs: Sequence[Job],
    limit: int | None,
) -> list:
    """Throughput at each client count, at least ``per_count`` requests (two per client) each; printed as it goes."""
    rows = []
    for clients in counts:
        count = max(per_count, 2 * clients)
        rows.append(throughput(call, [jobs[i % len(jobs)] for i in range(count)], clients, limit))
        print(f"  {side}: {clients} clients, {rows[-1]['requests_per_s']:.2f} req/s", flush=True)
    return rows


def run_upstream(args: argparse.Namespace, jobs: list[Job], short: list[Job], conn: Any) -> None:
    from voicelab.bench.cosyvoice_upstream import load_naive, run_naive

    started = time.perf_counter()
    model = load_naive(Path(args.model_dir), args.code)
    load_s = time.perf_counter() - started
    rows, samples = [], [_torch_sample(0)]
    for index, job in enumerate(jobs):
        audio, latency, first = run_naive(model, job.text, job.transcript, job.prompt, job.seed)
        rows.append((latency, first, len(audio) / 24000))
        if (index + 1) % WINDOW == 0:
            samples.append(_torch_sample((index + 1) // WINDOW))
            _say_window("upstream", index + 1, len(jobs), samples[-1])

    def call(job: Job) -> float:
        return len(run_naive(model, job.text, job.transcript, job.prompt, job.seed)[0]) / 24000

    counts = args.upstream_clients or args.clients  # its webui serves two at once: more clients only wait
    served = _throughputs("upstream", call, counts, args.throughput_requests, short, WEBUI_CONCURRENCY)
    conn.send({"load_s": load_s, "rows": rows, "samples": [asdict(s) for s in samples], "throughput": served})


def _request(job: Job, stream: bool) -> Any:
    from voicelab.studio import GenerationRequest, PromptClip

    return GenerationRequest(
        job.text, kind="clone", prompt=PromptClip(job.prompt, job.transcript), seed=job.seed,
        options={"stream": 1.0 if stream else 0.0},
    )  # fmt: skip


def _whole_request(service: Any) -> Callable[[Job], float]:
    """A job sent whole (not streamed) through the service; the seconds of audio it made."""

    def call(job: Job) -> float:
        return float(service.generate(_request(job, stream=False)).first.result.duration_s)

    return call


def corpus_cut(index: int, chars: int) -> str:
    """The ``index``-th text of ``chars`` characters cut from the soak's corpus (97 characters apart): the streamed
    texts of ``bench cosyvoice`` and of the first-audio benches, so each measures first audio on the same texts."""
    from voicelab.bench.soak import CORPUS

    return CORPUS[(97 * index) % (len(CORPUS) - chars) :][:chars].strip()


def stream_jobs(jobs: Sequence[Job], chars: int) -> list[tuple[Job, bool]]:
    """The streamed phase's requests, each with whether its voice is cached: texts cut from the corpus at ``chars``
    characters (0: as drawn), so first audio is measured on a text of the length the goal names; even ones in the
    voice the soak kept cached (its first prompt, used by every fourth request; the goal, like upstream's ~190 ms,
    is for a cached speaker), odd ones in the soak's own cut (new to the cache again: eight later voices evicted it),
    so first audio with the prompt's features still to make is shown too."""
    cached = jobs[0]
    chosen = []
    for index, job in enumerate(jobs):
        text = corpus_cut(index, chars) if chars else job.text
        voice = cached if index % 2 == 0 else job
        chosen.append((Job(text, voice.prompt, voice.transcript, job.seed), index % 2 == 0))
    return chosen


def _engine_sample(engine: Any, window: int) -> Sample:
    stats = engine.allocator_stats()
    pid = stats.worker_pid or engine.status().worker_pid
    return _sample(window, pid, stats.allocated, stats.reserved, stats.non_releasable)


def engine_flags(parser: argparse.ArgumentParser) -> None:
    """The flags ``engine_settings`` reads, for a bench that runs the engine in this process or in its worker."""
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--code", default="")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--backend-options", default="decode_slots=16")
    parser.add_argument("--backend", default="cosyvoice", help="(tests: a test double's module:factory)")


def engine_settings(args: argparse.Namespace, **changes: Any) -> Any:
    """The engine settings of every CosyVoice bench, from its flags: ``--model-dir``, ``--code``,
    ``--backend-options`` and, where the bench has them, ``--device`` (else cuda) and ``--backend`` (else
    cosyvoice; tests name a test double); a long job timeout; ``changes`` on top."""
    from voicelab.settings import Settings

    return Settings(
        backend=getattr(args, "backend", "cosyvoice"), cosyvoice_dir=args.model_dir, cosyvoice_code=args.code,
        device=getattr(args, "device", "cuda"), job_timeout_s=600.0, backend_options=args.backend_options, **changes,
    )  # fmt: skip


def _engine(args: argparse.Namespace, dtype: str) -> Any:
    from voicelab.engine.client import EngineClient

    settings = engine_settings(args, dtype=dtype)
    return EngineClient(settings), settings


def _soak(service: Any, engine: Any, jobs: list[Job]) -> tuple[list, list[Sample], list[int]]:
    rows, samples, peaks = [], [_engine_sample(engine, 0)], []
    for index, job in enumerate(jobs):
        result = service.generate(_request(job, stream=False)).first.result
        rows.append((result.latency_s, result.first_audio_s, result.duration_s))
        peaks.append(result.peak_allocated_bytes)
        if (index + 1) % WINDOW == 0:
            samples.append(_engine_sample(engine, (index + 1) // WINDOW))
            _say_window("voicelab", index + 1, len(jobs), samples[-1])
    return rows, samples, peaks


def run_voicelab(args: argparse.Namespace, jobs: list[Job], short: list[Job], conn: Any) -> None:
    from voicelab.studio import GenerationService

    started = time.perf_counter()
    engine, settings = _engine(args, args.dtype)
    with engine:
        engine.wait_ready(timeout=600)
        load_s = time.perf_counter() - started
        fresh_nvml = _engine_sample(engine, 0).nvml_used
        service = GenerationService(engine, None, settings)
        rows, samples, peaks = _soak(service, engine, jobs)
        streamed = []
        for job, cached in stream_jobs(jobs[: args.stream_requests], args.stream_chars):
            result = service.generate(_request(job, stream=True)).first.result
            streamed.append((result.latency_s, result.first_audio_s, result.duration_s, float(cached)))
            print(f"  voicelab streamed ({'cached' if cached else 'new'} voice): first audio "
                  f"{result.first_audio_s:.3f} s of {result.duration_s:.1f} s", flush=True)  # fmt: skip

        call = _whole_request(service)
        try:
            served = _throughputs("voicelab", call, args.clients, args.throughput_requests, short, None)
        except Exception as exc:  # the soak's figures above still stand; say what broke
            print(f"  voicelab throughput failed: {type(exc).__name__}: {exc}", flush=True)
            served = []
        try:
            anchor = anchor_phase(call, getattr(args, "anchor_requests", 0), getattr(args, "anchor_clients", [1, 4]))
        except Exception as exc:
            print(f"  voicelab anchor phase failed: {type(exc).__name__}: {exc}", flush=True)
            anchor = None
        restart = engine.soft_restart(timeout=600)
        time.sleep(1.0)  # NVML's per-process figure settles a moment after the load
        restarted_nvml = nvml_used(restart.new_pid)
    conn.send({
        "load_s": load_s, "rows": rows, "samples": [asdict(s) for s in samples], "streamed": streamed,
        "throughput": served, "probe_peak": max(peaks[:PROBE_REQUESTS]), "fresh_nvml": fresh_nvml,
        "restarted_nvml": restarted_nvml, "anchor": anchor,
    })  # fmt: skip


def anchor_phase(call: Callable[[Job], float], requests: int, clients: Sequence[int]) -> dict[str, Any] | None:
    """NVIDIA's shape (``cosyvoice_anchor``): two probes size the texts to ~8.5 s replies, then ``requests`` of them
    at each client count, every one in a voice new to the cache; ``None`` when ``requests`` is 0."""
    from voicelab.bench.cosyvoice_anchor import PROBE_CHARS, anchor_texts, anchor_voices, sized_chars
    from voicelab.bench.soak import base_prompts

    if requests <= 0:
        return None
    with tempfile.TemporaryDirectory() as folder:
        bases = base_prompts()
        voices = anchor_voices(Path(folder), requests * len(clients) + len(PROBE_CHARS), bases)
        probes = [(c, call(Job(anchor_texts(1, c)[0], *voices[-1 - i], 9000 + i))) for i, c in enumerate(PROBE_CHARS)]
        chars = sized_chars(probes)
        texts = anchor_texts(requests, chars)
        rows = []
        for round_, count in enumerate(clients):
            jobs = [Job(t, *voices[round_ * requests + i], 7000 + i) for i, t in enumerate(texts)]
            rows.append(throughput(call, jobs, count, None))
            print(f"  voicelab anchor: {count} clients, RTF {1 / max(rows[-1]['audio_s_per_s'], 1e-9):.3f}", flush=True)
    return {"chars": chars, "probes": probes, "throughput": rows}


def run_dtype_probe(args: argparse.Namespace, jobs: list[Job], short: list[Job], conn: Any) -> None:
    """The first ``PROBE_REQUESTS`` soak requests in ``--probe-dtype``: the per-request peak to set beside float32's;
    then the anchor phase at one client, for the speed of one request in that dtype."""
    from voicelab.studio import GenerationService

    engine, settings = _engine(args, args.probe_dtype)
    with engine:
        engine.wait_ready(timeout=600)
        service = GenerationService(engine, None, settings)
        peaks = [
            service.generate(_request(job, stream=False)).first.result.peak_allocated_bytes
            for job in jobs[:PROBE_REQUESTS]
        ]
        # its speed alone, beside float32's
        anchor = anchor_phase(_whole_request(service), getattr(args, "anchor_requests", 0), [1])
    conn.send({"probe_peak": max(peaks), "anchor": anchor})
