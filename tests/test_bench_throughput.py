"""The throughput benchmark's CI smoke run: both modes, every concurrency, and the final ratio line (tiny numbers,
with the tone backend so it takes seconds)."""

from __future__ import annotations

import re

import pytest

from voicelab.backends.base import GraphBucket
from voicelab.bench import throughput


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
