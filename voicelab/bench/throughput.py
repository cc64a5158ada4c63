"""Throughput benchmark: N concurrent clients, micro-batched against one job at a time, in one run.

    python -m voicelab bench throughput --device cuda --concurrency 1,2,4,8,16 [--clone]

Each mode gets its own worker process (the same as the app's) on the same device, both loaded at the start:
``sequential`` has micro-batching off (``batch_window_ms`` 0: one job on the device at a time), ``batched`` the
configured window. Each concurrency runs in one mode right after the other (side by side, so a busy machine
skews both alike). At each concurrency every client sends ``--rounds`` requests back to back (closed loop) from
a fixed set of sentences, so both modes see the same work. Latency is submit to result, time to first audio
submit to the first chunk in the client's hands (queue wait included), as a caller sees them. ``--clone`` adds
the same with a voice prompt whose profile is cached (built once in the warm-up). Last line: the throughput
ratio at 8 clients, batched over sequential, for plain requests.
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from voicelab.backends.base import GraphBucket
from voicelab.bench.soak import CORPUS, COSYVOICE_ELSEWHERE
from voicelab.engine.client import EngineClient
from voicelab.engine.messages import AllocatorStats, SynthesisRequest
from voicelab.settings import from_environment
from voicelab.voice.prompt import PromptAudio

SENTENCES = [s.strip() + "." for s in CORPUS.split(". ") if s.strip()]
DEFAULT_PROMPT = Path(__file__).resolve().parents[2] / "tests" / "data" / "arctic_slt_en_female.wav"
PARAGRAPH_CHARS = 600
MIB = 2**20


@dataclass(frozen=True)
class Row:
    """One mode x kind x concurrency: what the clients saw."""

    mode: str
    kind: str
    clients: int
    requests_per_s: float
    audio_s_per_s: float
    p50_ms: float
    p95_ms: float
    ttfa_p50_ms: float
    ttfa_p95_ms: float
    mean_batch: float


@dataclass(frozen=True)
class Sample:
    latency_s: float
    first_audio_s: float
    audio_s: float
    batch_size: int


def request_text(client: int, round_: int, sentences: int) -> str:
    """A deterministic text of ``sentences`` sentences, different per client and round."""
    start = (client * 7 + round_ * 3) % len(SENTENCES)
    return " ".join(SENTENCES[(start + k) % len(SENTENCES)] for k in range(sentences))


def paragraph(chars: int = PARAGRAPH_CHARS) -> str:
    text, k = "", 0
    while len(text) < chars:
        text = f"{text} {SENTENCES[k % len(SENTENCES)]}".strip()
        k += 1
    return text


def timed(engine: EngineClient, request: SynthesisRequest) -> Sample:
    """Submit and wait, as a streaming caller: the first chunk's arrival and the result's."""
    start = time.perf_counter()
    job = engine.submit(request)
    first = 0.0
    for _ in job.chunks(timeout=300):
        first = first or time.perf_counter() - start
    result = job.result(0)
    latency = time.perf_counter() - start
    return Sample(latency, first or latency, result.duration_s, result.batch_size)


def drive(engine: EngineClient, clients: int, rounds: int, prompt: PromptAudio | None, sentences: int) -> list[Sample]:
    """``clients`` threads, each sending ``rounds`` requests one after another; every sample, in no order."""
    samples: list[Sample] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def client(index: int) -> None:
        try:
            for r in range(rounds):
                text = request_text(index, r, sentences)
                sample = timed(engine, SynthesisRequest(text, seed=index * 1000 + r, prompt=prompt))
                with lock:
                    samples.append(sample)
        except BaseException as exc:  # reported after the join, so one failure cannot hang the run
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return samples


def summarise(mode: str, kind: str, clients: int, samples: list[Sample], wall_s: float) -> Row:
    latency = np.array([s.latency_s for s in samples]) * 1000
    ttfa = np.array([s.first_audio_s for s in samples]) * 1000
    return Row(
        mode=mode,
        kind=kind,
        clients=clients,
        requests_per_s=len(samples) / wall_s,
        audio_s_per_s=sum(s.audio_s for s in samples) / wall_s,
        p50_ms=float(np.percentile(latency, 50)),
        p95_ms=float(np.percentile(latency, 95)),
        ttfa_p50_ms=float(np.percentile(ttfa, 50)),
        ttfa_p95_ms=float(np.percentile(ttfa, 95)),
        mean_batch=float(np.mean([s.batch_size for s in samples])),
    )


Kinds = list[tuple[str, PromptAudio | None]]


def warm_up(engine: EngineClient, args: argparse.Namespace, kinds: Kinds) -> AllocatorStats:
    """The clone profile, the allocator's first segments and, on a GPU, the measured requests themselves twice, so
    no measured request pays for a shape: a CUDA graph bucket is captured on its second use, and the texts vary by
    round, so two rounds of warm-up left most of them to be captured while the bench measured (their capture, 50-65
    ms, set a 20-request run's p95). Returns the allocator's figures after it."""
    engine.wait_ready()
    warm = args.concurrency if args.device == "cuda" else [max(args.concurrency)]
    rounds, times = (args.rounds, 2) if args.device == "cuda" else (1, 1)
    for _, voice in kinds:
        for clients in warm:
            for _ in range(times):
                drive(engine, clients, rounds, voice, args.sentences)
    return engine.allocator_stats()


def run_side_by_side(engines: dict[str, EngineClient], args: argparse.Namespace, kinds: Kinds) -> list[Row]:
    """Each concurrency in every mode, one mode right after the other, so a busy machine skews both alike."""
    rows: list[Row] = []
    warmed = {mode: warm_up(engine, args, kinds) for mode, engine in engines.items()}
    reserved = {mode: [stats.reserved] for mode, stats in warmed.items()}
    for kind, voice in kinds:
        for clients in args.concurrency:
            for mode, engine in engines.items():
                started = time.perf_counter()
                samples = drive(engine, clients, args.rounds, voice, args.sentences)
                rows.append(summarise(mode, kind, clients, samples, time.perf_counter() - started))
                print(format_row(rows[-1]), flush=True)
                reserved[mode].append(engine.allocator_stats().reserved)
        for mode, engine in engines.items():
            long = [timed(engine, SynthesisRequest(paragraph(), seed=k, prompt=voice)) for k in range(args.rounds)]
            ttfa = np.median([s.first_audio_s for s in long]) * 1000
            print(f"{mode:<10} {kind:<6} time to first audio, {PARAGRAPH_CHARS} characters, alone: {ttfa:.1f} ms")
    for mode, engine in engines.items():
        print(graphs_line(mode, engine.status().graphs))
    for mode, engine in engines.items():
        before, end = warmed[mode], engine.allocator_stats()
        print(
            f"{mode:<10} memory: allocated after warm-up {before.allocated / MIB:.1f} MiB, at the end "
            f"{end.allocated / MIB:.1f} MiB (growth {(end.allocated - before.allocated) / MIB:+.2f}); reserved "
            f"{before.reserved / MIB:.0f} -> max {max(reserved[mode]) / MIB:.0f} MiB"
        )
    return rows


def graphs_line(mode: str, graphs: Sequence[GraphBucket]) -> str:
    """How many CUDA graph buckets the worker kept, and each it runs eagerly with its timings: a bucket whose graph
    lost its timing at capture runs eagerly for the worker's life, so a slow worker shows here."""
    eager = [g for g in graphs if not g.kept]
    named = [f"{g.stage} {g.rows}x{g.length} ({g.eager_ms:.1f} eager, {g.graph_ms:.1f} replayed)" for g in eager]
    line = f"{mode:<10} CUDA graphs: {len(graphs) - len(eager)} of {len(graphs)} buckets kept"
    return line + (f"; eager: {', '.join(named)}" if named else "")


HEADER = (
    f"{'mode':<10} {'kind':<6} {'clients':>7} {'req/s':>8} {'audio-s/s':>10} {'p50 ms':>8} {'p95 ms':>8} "
    f"{'TTFA p50':>9} {'TTFA p95':>9} {'batch':>6}"
)


def format_row(row: Row) -> str:
    return (
        f"{row.mode:<10} {row.kind:<6} {row.clients:>7} {row.requests_per_s:>8.2f} {row.audio_s_per_s:>10.1f} "
        f"{row.p50_ms:>8.1f} {row.p95_ms:>8.1f} {row.ttfa_p50_ms:>9.1f} {row.ttfa_p95_ms:>9.1f} {row.mean_batch:>6.2f}"
    )


def ratio_lines(rows: Sequence[Row], at: int = 8) -> list[str]:
    """Batched over sequential requests/s at ``at`` clients (the largest measured when ``at`` was not)."""
    measured = sorted({r.clients for r in rows})
    clients = at if at in measured else measured[-1]
    by = {(r.mode, r.kind, r.clients): r.requests_per_s for r in rows}
    lines = []
    for kind in ("cloned", "plain"):  # plain last: the benchmark's final line
        if ("batched", kind, clients) in by:
            ratio = by[("batched", kind, clients)] / by[("sequential", kind, clients)]
            label = "throughput ratio" if kind == "plain" else "cloned throughput ratio"
            lines.append(f"{label} at {clients} clients (batched/sequential): {ratio:.2f}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m voicelab bench throughput", description=__doc__)
    parser.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--backend", default="builtin")
    parser.add_argument("--concurrency", default="1,2,4,8,16", help="comma-separated client counts")
    parser.add_argument("--rounds", type=int, default=6, help="requests per client at each concurrency")
    parser.add_argument("--sentences", type=int, default=2, help="sentences per request")
    parser.add_argument("--clone", action="store_true", help="also cloned requests (a cached voice profile)")
    parser.add_argument("--prompt", type=Path, default=DEFAULT_PROMPT, help="the voice prompt for --clone")
    parser.add_argument("--window-ms", type=float, default=None, help="the batched mode's window (default: settings)")
    args = parser.parse_args(argv)
    if args.backend == "cosyvoice":
        parser.error(COSYVOICE_ELSEWHERE)
    args.concurrency = sorted({int(c) for c in args.concurrency.split(",") if c.strip()})
    base = replace(from_environment(), device=args.device, dtype=args.dtype, backend=args.backend)
    base = replace(base, queue_size=max(base.queue_size, 2 * max(args.concurrency)), job_timeout_s=600.0)
    batched = base if args.window_ms is None else replace(base, batch_window_ms=args.window_ms)
    prompt = None
    if args.clone:
        from voicelab.voice.intake import load_prompt

        prompt = load_prompt(args.prompt)
    print(f"device {args.device} ({args.dtype}), backend {args.backend}, {args.rounds} requests per client")
    kinds: Kinds = [("plain", None)] + ([("cloned", prompt)] if prompt else [])
    with contextlib.ExitStack() as stack:  # both workers load at once, then run side by side
        engines = {
            "sequential": stack.enter_context(EngineClient(replace(base, batch_window_ms=0.0))),
            "batched": stack.enter_context(EngineClient(batched)),
        }
        print(HEADER)
        rows = run_side_by_side(engines, args, kinds)
    for line in ratio_lines(rows):
        print(line)
    return 0
