"""Two GPUs behind one engine (``--devices cuda:0,cuda:1``): each worker on its own device with its own memory,
jobs on both at once, and a kill -9 of one that fails only its job while the other keeps serving.
Skipped without CUDA (the ``gpu`` marker) and with fewer than two devices."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from tests.gpu_needs import BUILTIN_ON_GPU
from voicelab.engine.client import EngineClient
from voicelab.engine.messages import SynthesisRequest
from voicelab.errors import WorkerCrashedError
from voicelab.settings import Settings
from voicelab.telemetry.nvml import NvmlSampler

pytestmark = pytest.mark.gpu

LONG = " ".join(["The committee will meet again on Thursday at half past three to review the plans."] * 12)


def _device_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.fixture(scope="module")
def pair() -> Iterator[EngineClient]:
    if _device_count() < 2:
        pytest.skip("needs two or more CUDA devices")
    settings = Settings(devices="cuda:0,cuda:1", auto_clean=False, queue_size=32, backend=BUILTIN_ON_GPU)
    with EngineClient(settings) as engine:
        engine.wait_ready()
        yield engine


def test_each_worker_runs_on_its_own_gpu(pair: EngineClient) -> None:
    results = [pair.submit(SynthesisRequest(LONG, seed=i)) for i in range(8)]
    devices = {job.result(timeout=300).device for job in results}
    assert devices == {"cuda:0", "cuda:1"}
    for worker in pair.status().workers:
        index = int(worker.device.partition(":")[2])
        with NvmlSampler(index) as nvml:
            figures = nvml.sample([worker.pid])
            assert figures is not None and (figures.used_by(worker.pid) or 0) > 100 * 2**20
        stats = pair.allocator_stats(worker=worker.index)
        assert stats.device == worker.device and stats.allocated > 0


def test_kill_9_of_one_gpu_worker_fails_only_its_job(pair: EngineClient) -> None:
    before = pair.status()
    jobs = [pair.submit(SynthesisRequest(LONG, seed=100 + i)) for i in range(24)]
    deadline = time.monotonic() + 60
    while not pair.status().workers[1].in_flight_jobs:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    os.kill(before.workers[1].pid, signal.SIGKILL)
    failed = 0
    for job in jobs:
        try:
            job.result(timeout=300)
        except WorkerCrashedError:
            failed += 1
    after = pair.status()
    assert failed <= 1 and after.failed - before.failed == failed
    assert after.workers[0].pid == before.workers[0].pid and after.workers[0].restarts == before.workers[0].restarts
    assert pair.synthesize(SynthesisRequest("Still serving."), timeout=120).duration_s > 0


def test_clean_cache_on_one_gpu_leaves_the_other_alone(pair: EngineClient) -> None:
    pair.synthesize(SynthesisRequest(LONG), timeout=120)
    report = pair.clean_cache(worker=0)
    assert report.after.device == "cuda:0" and report.after.reserved <= report.before.reserved
    every = pair.clean_cache()
    assert every.before.device == "cuda:0+cuda:1"
