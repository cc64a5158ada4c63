"""Throughput with 1 device against N devices, in one run: the same clients, the same texts, one engine each.

    python -m voicelab bench devices --devices cuda:0,cuda:1 --concurrency 1,4,16 [--rounds 8] [--kill-one]

First an engine with only the first device of ``--devices``, then one with all of them (a worker per device,
as the app runs with ``--devices``). At each concurrency every client sends ``--rounds`` requests back to back
(closed loop) from a fixed set of sentences. Printed per row: requests/s, audio seconds per second, p50/p95
latency (submit to result), and how the jobs spread over the workers; per device, allocated/reserved and worker
RSS after warm-up and at the end. Last line: the throughput ratio at the highest concurrency, N devices over 1.
``--kill-one`` then sends one more round on the N-device engine and kill -9s the last worker while its job runs:
the line says how many jobs failed (the goal: its one job in flight) and how many the other devices served.
``throughput.py`` may call ``compare_devices`` for its own ``--devices`` flag.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from voicelab.bench.soak import CORPUS
from voicelab.engine.client import EngineClient
from voicelab.engine.messages import SynthesisRequest
from voicelab.errors import VoiceLabError
from voicelab.settings import Settings, from_environment

SENTENCES = [s.strip() + "." for s in CORPUS.split(". ") if s.strip()]
MIB = 2**20


@dataclass(frozen=True)
class Row:
    """One engine x concurrency: what the clients saw."""

    devices: int
    clients: int
    requests: int
    failed: int
    requests_per_s: float
    audio_s_per_s: float
    p50_ms: float
    p95_ms: float
    per_worker: tuple[int, ...]  # jobs completed by each worker in this row


def text_for(client: int, round_: int, sentences: int = 2) -> str:
    start = (client * 7 + round_ * 3) % len(SENTENCES)
    return " ".join(SENTENCES[(start + k) % len(SENTENCES)] for k in range(sentences))


def drive(engine: EngineClient, clients: int, rounds: int, sentences: int) -> tuple[list[float], float, int, float]:
    """Closed loop: latencies (s), audio seconds, failures and wall seconds."""
    latencies: list[float] = []
    audio = [0.0]
    failed = [0]
    lock = threading.Lock()

    def client(index: int) -> None:
        for round_ in range(rounds):
            start = time.perf_counter()
            try:
                result = engine.synthesize(SynthesisRequest(text_for(index, round_, sentences), seed=index), 600)
            except VoiceLabError:
                with lock:
                    failed[0] += 1
                continue
            with lock:
                latencies.append(time.perf_counter() - start)
                audio[0] += result.duration_s

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, audio[0], failed[0], time.perf_counter() - started


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(share * len(ordered)), len(ordered) - 1)] if ordered else float("nan")


def measure(engine: EngineClient, clients: int, rounds: int, sentences: int) -> Row:
    before = [w.completed for w in engine.status().workers]
    latencies, audio_s, failed, wall = drive(engine, clients, rounds, sentences)
    after = [w.completed for w in engine.status().workers]
    return Row(
        devices=len(after),
        clients=clients,
        requests=len(latencies),
        failed=failed,
        requests_per_s=len(latencies) / wall,
        audio_s_per_s=audio_s / wall,
        p50_ms=statistics.median(latencies) * 1000 if latencies else float("nan"),
        p95_ms=_percentile(latencies, 0.95) * 1000,
        per_worker=tuple(b - a for a, b in zip(before, after, strict=True)),
    )


def memory_line(label: str, engine: EngineClient) -> str:
    """Each worker's allocator figures, asked for now (a stats round-trip between jobs)."""
    parts = []
    for worker in engine.status().workers:
        s = engine.allocator_stats(worker=worker.index)
        parts.append(
            f"{worker.label} {s.allocated / MIB:.1f}/{s.reserved / MIB:.1f} MiB, RSS {s.worker_rss / MIB:.0f} MiB"
        )
    return f"  memory {label} (allocated/reserved): " + "; ".join(parts)


def kill_one(engine: EngineClient, clients: int, sentences: int) -> str:
    """One round from every client while the last worker is killed mid-job; who failed, who served."""
    victim = engine.status().workers[-1]
    done = threading.Event()
    outcome: list[tuple[list[float], float, int, float]] = []

    def load() -> None:
        outcome.append(drive(engine, clients, 2, sentences))
        done.set()

    thread = threading.Thread(target=load)
    thread.start()
    deadline = time.monotonic() + 60
    while not engine.status().workers[-1].in_flight_jobs and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(victim.pid, signal.SIGKILL)
    thread.join()
    latencies, _, failed, _ = outcome[0]
    return (
        f"kill -9 of {victim.label} (pid {victim.pid}) mid-job: {failed} job(s) failed (goal: 1, its job in flight), "
        f"{len(latencies)} served"
    )


def compare_devices(
    settings: Settings, concurrency: Sequence[int], rounds: int, sentences: int = 2, kill: bool = False
) -> list[Row]:
    """Rows for the first device alone, then for every device of ``settings.device_list``; printed as they come."""
    devices = settings.device_list
    rows: list[Row] = []
    for listed in dict.fromkeys([devices[:1], devices]):
        with EngineClient(replace(settings, devices=",".join(listed))) as engine:
            engine.wait_ready()
            drive(engine, max(len(listed), 2) * 2, 1, sentences)  # warm-up: every worker sees work
            print(memory_line("after warm-up", engine), flush=True)
            for clients in concurrency:
                row = measure(engine, clients, rounds, sentences)
                rows.append(row)
                print(format_row(row), flush=True)
            print(memory_line("at the end", engine), flush=True)
            if kill and len(listed) > 1:
                print(kill_one(engine, max(concurrency), sentences), flush=True)
    return rows


def format_row(row: Row) -> str:
    spread = "/".join(str(n) for n in row.per_worker)
    return (
        f"{row.devices} device(s) {row.clients:>3} clients: {row.requests_per_s:7.2f} req/s "
        f"{row.audio_s_per_s:7.1f} audio s/s  p50 {row.p50_ms:7.1f} ms  p95 {row.p95_ms:7.1f} ms  "
        f"jobs per worker {spread}  failed {row.failed}"
    )


def ratio_line(rows: Sequence[Row]) -> str:
    top = max(r.clients for r in rows)
    one = next((r for r in rows if r.devices == 1 and r.clients == top), None)
    many = next((r for r in rows if r.devices > 1 and r.clients == top), None)
    if one is None or many is None:
        return "throughput ratio: needs two or more devices in --devices"
    return (
        f"throughput ratio at {top} clients ({many.devices} devices / 1 device): "
        f"{many.requests_per_s / one.requests_per_s:.2f}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m voicelab bench devices", description=__doc__)
    parser.add_argument("--devices", default="cuda:0,cuda:1", help="comma-separated, e.g. cuda:0,cuda:1 or cpu,cpu")
    parser.add_argument("--concurrency", default="1,4,16", help="comma-separated client counts")
    parser.add_argument("--rounds", type=int, default=8, help="requests per client at each concurrency")
    parser.add_argument("--sentences", type=int, default=2, help="sentences per request")
    parser.add_argument("--backend", default="builtin", help="a backend name or module:factory")
    parser.add_argument("--dtype", default="")
    parser.add_argument("--queue-size", type=int, default=64)
    parser.add_argument("--kill-one", action="store_true", help="then kill -9 one worker mid-job under load")
    args = parser.parse_args(argv)
    settings = replace(from_environment(), devices=args.devices, queue_size=args.queue_size)
    if args.backend:
        settings = replace(settings, backend=args.backend)
    if args.dtype:
        settings = replace(settings, dtype=args.dtype)
    concurrency = [int(c) for c in args.concurrency.split(",") if c.strip()]
    rows = compare_devices(settings, concurrency, args.rounds, args.sentences, kill=args.kill_one)
    print(ratio_line(rows), flush=True)
    return 0
