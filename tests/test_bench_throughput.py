"""The throughput benchmark's CI smoke run: both modes, every concurrency, and the final ratio line (tiny numbers,
with the tone backend so it takes seconds)."""

from __future__ import annotations

import argparse
import re
from collections import Counter
from types import SimpleNamespace

import pytest

from voicelab.backends.base import GraphBucket
from voicelab.bench import throughput
from voicelab.engine.messages import SynthesisRequest


def test_the_benchmark_prints_both_modes_and_ends_with_the_ratio_at_8_clients(
    capsys: pytest.CaptureFixture[str],
) -> None:
    backend = "tests.fixture_batched_backend:BatchedToneBackend"
    code = throughput.main(["--device", "cpu", "--backend", backend, "--concurrency", "1,8", "--rounds", "1"])
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    rows = [line.split() for line in lines if re.match(r"^(sequential|batched)\s+plain\s+\d", line)]
    assert [(r[0], int(r[2])) for r in rows] == [("sequential", 1), ("batched", 1), ("sequential", 8), ("batched", 8)]
    assert all(float(r[3]) > 0 and float(r[4]) > 0 for r in rows)  # requests/s and audio-seconds/s
    assert all(float(r[7]) <= float(r[5]) + 1e-6 for r in rows)  # first audio no later than the whole result
    assert any("time to first audio, 600 characters" in line for line in lines)
    assert any(line.startswith("batched    memory: allocated after warm-up") for line in lines)
    assert "sequential CUDA graphs: 0 of 0 buckets kept" in lines  # a CPU worker captures none
    assert re.fullmatch(r"throughput ratio at 8 clients \(batched/sequential\): \d+\.\d\d", lines[-1])


def test_the_graphs_line_names_every_bucket_a_worker_runs_eagerly() -> None:
    graphs = [
        GraphBucket("decode", 1, 512, 1 << 20, 24.0, 3.1, True),
        GraphBucket("encode", 2, 64, 1 << 20, 6.2, 7.9, False),
    ]
    line = throughput.graphs_line("batched", graphs)
    assert line == "batched    CUDA graphs: 1 of 2 buckets kept; eager: encode 2x64 (6.2 eager, 7.9 replayed)"


class RecordingEngine:
    """An engine client that answers at once and keeps every text it was sent."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def wait_ready(self) -> None:
        pass

    def allocator_stats(self) -> None:
        return None

    def submit(self, request: SynthesisRequest) -> SimpleNamespace:
        self.texts.append(request.text)
        result = SimpleNamespace(duration_s=1.0, batch_size=1)
        return SimpleNamespace(chunks=lambda timeout: iter([b"chunk"]), result=lambda timeout: result)


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_on_a_gpu_the_warm_up_sends_every_measured_request_twice_so_no_graph_is_captured_while_measuring(
    device: str,
) -> None:
    args = argparse.Namespace(device=device, concurrency=[1, 2], rounds=3, sentences=2)
    engine = RecordingEngine()
    throughput.warm_up(engine, args, [("plain", None)])  # type: ignore[arg-type]
    measured = Counter(throughput.request_text(c, r, 2) for clients in (1, 2) for c in range(clients) for r in range(3))
    warmed = Counter(engine.texts)
    if device == "cuda":  # a bucket is captured on its second use: each measured text has had two before
        assert all(warmed[text] >= 2 * count for text, count in measured.items())
    else:  # a CPU captures nothing: one round at the largest concurrency makes the profile and the allocator's blocks
        assert len(engine.texts) == 2
