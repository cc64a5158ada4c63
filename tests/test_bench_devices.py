"""``bench devices`` smoke run on CPU: one worker, then two, the same clients; both rows and the ratio line."""

from __future__ import annotations

import re

import pytest

from voicelab.bench import devices


def test_bench_devices_compares_one_worker_with_two(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--devices", "cpu,cpu", "--backend", "tests.fixture_backends:ToneBackend", "--concurrency", "4"]
    assert devices.main([*argv, "--rounds", "2", "--queue-size", "8"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^(\d) device\(s\)\s+4 clients: .* jobs per worker (\S+)\s+failed (\d+)$", out, re.M)
    assert [(n, failed) for n, _, failed in rows] == [("1", "0"), ("2", "0")]
    spread = [int(jobs) for jobs in rows[1][1].split("/")]
    assert sum(spread) == 8 and min(spread) > 0, "both workers served"
    assert re.search(r"^throughput ratio at 4 clients \(2 devices / 1 device\): \d+\.\d\d$", out, re.M)
    assert out.count("memory after warm-up") == 2
