"""The UI-side sampler: real host figures, a clear "no NVIDIA GPU" without NVML, ~1 s cadence, never stuck."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
from types import SimpleNamespace
from typing import Any

import pytest

from voicelab.engine.messages import AllocatorStats
from voicelab.telemetry.host import HostSampler
from voicelab.telemetry.nvml import NO_GPU, NvmlSampler
from voicelab.telemetry.sampler import TelemetrySampler, next_tick
from voicelab.telemetry.samples import EngineState

GiB = 1024**3
MiB = 1024**2


def has_nvml_gpu() -> bool:
    sampler = NvmlSampler()
    try:
        return sampler.available
    finally:
        sampler.close()


def test_host_figures_are_real_numbers() -> None:
    figures = HostSampler().sample(worker_pid=os.getpid())
    assert figures.ui_pid == os.getpid()
    assert figures.ui_rss > 10 * MiB  # a Python process with numpy/torch importable is never this small
    assert figures.worker_rss is not None and figures.worker_rss > 10 * MiB
    assert 0 < figures.ram_used < figures.ram_total
    assert 0.0 <= figures.cpu_pct <= 100.0


def test_host_sampler_reports_a_vanished_worker_as_none() -> None:
    gone = os.getpid() + 4_000_000  # beyond any pid_max
    figures = HostSampler().sample(worker_pid=gone)
    assert figures.worker_pid == gone
    assert figures.worker_rss is None


@pytest.mark.skipif(has_nvml_gpu(), reason="this machine has an NVIDIA GPU")
def test_without_nvml_the_sampler_says_no_nvidia_gpu() -> None:
    nvml = NvmlSampler()
    assert nvml.available is False
    assert nvml.reason is not None and nvml.reason.startswith(NO_GPU)
    assert "\n" not in nvml.reason
    assert nvml.sample(pids=[os.getpid()]) is None
    nvml.close()
    nvml.close()  # idempotent


@pytest.mark.skipif(has_nvml_gpu(), reason="this machine has an NVIDIA GPU")
def test_sampler_produces_a_sample_about_every_second_without_nvml() -> None:
    sampler = TelemetrySampler(
        NvmlSampler(), HostSampler(), lambda: EngineState(queue_length=2, job_in_flight="j1"), clock=time.monotonic
    )
    assert sampler.nvml_note == NO_GPU
    sampler.start()
    try:
        deadline = time.monotonic() + 15.0  # a loaded CI machine may run the thread late, never early
        while len(sampler.ring) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        sampler.stop()
    assert not sampler.running
    samples = sampler.ring.samples()
    assert len(samples) >= 3
    first = samples[0].timestamp
    offsets = [sample.timestamp - first for sample in samples]
    # never early (how late depends on the machine's load; the grid itself is checked without threads below)
    assert all(offset > k - 0.05 for k, offset in enumerate(offsets)), offsets
    latest = samples[-1]
    assert latest.nvml is None and latest.nvml_note == NO_GPU
    assert latest.host.ui_rss > 0
    assert (latest.queue_length, latest.job_in_flight) == (2, "j1")


def test_the_cadence_stays_on_its_grid_and_restarts_after_a_stall() -> None:
    assert next_tick(10.0, 10.02, 1.0) == (11.0, pytest.approx(0.98))  # an ordinary sample
    assert next_tick(11.0, 11.7, 1.0) == (12.0, pytest.approx(0.3))  # a slow sample shortens the wait only
    assert next_tick(12.0, 13.5, 1.0) == (13.5, 0.0)  # a stall restarts the grid instead of bursting


def test_allocator_stats_pushed_by_the_client_are_merged_and_dropped_after_a_restart() -> None:
    worker = {"pid": 4242}
    sampler = TelemetrySampler(NvmlSampler(), HostSampler(), lambda: EngineState(worker_pid=worker["pid"]))
    assert sampler.sample_once().allocator is None
    stats = AllocatorStats(device="cuda:0", allocated=3 * GiB, reserved=4 * GiB, worker_pid=4242)
    sampler.push_allocator(stats)
    assert sampler.sample_once().allocator == stats
    worker["pid"] = 5151  # the worker was replaced; its predecessor's figures must not be shown as current
    assert sampler.sample_once().allocator is None


def test_a_failing_engine_state_does_not_stop_the_sampling_thread() -> None:
    calls = {"n": 0}

    def flaky() -> EngineState:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("client lock poisoned")
        return EngineState()

    sampler = TelemetrySampler(NvmlSampler(), HostSampler(), flaky, interval=0.05)
    sampler.start()
    time.sleep(0.4)
    sampler.stop()
    assert calls["n"] >= 3
    assert len(sampler.ring) >= 2


class FakeNvmlError(Exception):
    pass


def fake_pynvml(processes: list[Any]) -> types.ModuleType:
    """A stand-in for pynvml with one 80 GiB GPU that has no power sensor."""
    module = types.ModuleType("pynvml")
    info = SimpleNamespace(total=80 * GiB, used=10 * GiB, free=69 * GiB, reserved=1 * GiB)

    def no_power(handle: object) -> int:
        raise FakeNvmlError("Not Supported")

    calls: dict[str, Any] = {
        "NVMLError": FakeNvmlError,
        "NVML_TEMPERATURE_GPU": 0,
        "nvmlMemory_v2": 33554472,
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda index: ("handle", index),
        "nvmlDeviceGetName": lambda handle: b"Fake H200",
        "nvmlDeviceGetMemoryInfo": lambda handle, version=None: info,
        "nvmlDeviceGetUtilizationRates": lambda handle: SimpleNamespace(gpu=37, memory=12),
        "nvmlDeviceGetTemperature": lambda handle, sensor: 51,
        "nvmlDeviceGetPowerUsage": no_power,
        "nvmlDeviceGetEnforcedPowerLimit": no_power,
        "nvmlDeviceGetComputeRunningProcesses": lambda handle: processes,
    }
    for name, value in calls.items():
        setattr(module, name, value)
    return module


def test_nvml_figures_and_outside_pytorch_from_a_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    processes = [SimpleNamespace(pid=4242, usedGpuMemory=5 * GiB), SimpleNamespace(pid=99, usedGpuMemory=GiB)]
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(processes))
    nvml = NvmlSampler()
    assert nvml.available and nvml.reason is None and nvml.name == "Fake H200"
    sampler = TelemetrySampler(nvml, HostSampler(), lambda: EngineState(worker_pid=4242))
    sampler.push_allocator(AllocatorStats(device="cuda:0", allocated=3 * GiB, reserved=4 * GiB, worker_pid=4242))
    sample = sampler.sample_once()
    assert sample.nvml is not None
    assert (sample.nvml.total, sample.nvml.used, sample.nvml.free, sample.nvml.reserved) == (
        80 * GiB,
        10 * GiB,
        69 * GiB,
        GiB,
    )
    assert sample.nvml.utilisation_pct == 37.0 and sample.nvml.temperature_c == 51.0
    assert sample.nvml.power_w is None  # unsupported sensor → missing figure, not an error
    assert sample.worker_gpu_used == 5 * GiB
    assert sample.outside_pytorch == 1 * GiB  # 5 GiB used by the worker - 4 GiB reserved by torch
    assert sample.nvml_note is None


def test_a_gpu_index_that_does_not_exist_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([]))
    nvml = NvmlSampler(device_index=3)
    assert not nvml.available
    assert nvml.reason == f"{NO_GPU} at index 3 (1 found)"


def test_the_ui_side_telemetry_never_imports_torch() -> None:
    """The UI process must not initialise CUDA; importing torch there is the first step towards it."""
    code = (
        "import sys\n"
        "import voicelab.telemetry.sampler, voicelab.telemetry.pictures\n"
        "from voicelab.engine.memory import HygienePolicy, LeakWatch, configure_allocator\n"
        "sampler = voicelab.telemetry.sampler.TelemetrySampler()\n"
        "sampler.sample_once()\n"
        "sampler.close()\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
