"""The memory promises, on a real NVIDIA GPU: Clean cache, Soft restart and OOM recovery (skipped without CUDA)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import numpy as np
import pytest

from tests.gpu_needs import BUILTIN_ON_GPU, ENGLISH_VOICE
from voicelab.engine.client import EngineClient
from voicelab.engine.messages import SynthesisRequest
from voicelab.settings import Settings
from voicelab.telemetry.host import HostSampler
from voicelab.telemetry.nvml import NvmlSampler
from voicelab.telemetry.sampler import TelemetrySampler
from voicelab.telemetry.samples import EngineState

pytestmark = [pytest.mark.gpu, ENGLISH_VOICE]

LONG_TEXTS = [
    " ".join(["The committee will meet again on Thursday at half past three to review the plans."] * n)
    for n in (3, 6, 9, 12)
]
MIB = 2**20


@pytest.fixture(scope="module")
def client() -> Iterator[EngineClient]:
    with EngineClient(Settings(device="cuda", auto_clean=False, backend=BUILTIN_ON_GPU)) as engine:
        engine.wait_ready()
        yield engine


def _worker_vram(pid: int) -> int:
    with NvmlSampler() as nvml:
        figures = nvml.sample([pid])
        assert figures is not None
        used = figures.used_by(pid)
        assert used is not None, "NVML lists the worker process"
        return used


def _smi_used_by(pid: int) -> int:
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if fields and fields[0] == str(pid):
            return int(fields[1]) * MIB
    raise AssertionError(f"nvidia-smi does not list pid {pid}: {out!r}")


def test_panel_agrees_with_nvidia_smi_and_torch(client: EngineClient) -> None:
    client.synthesize(SynthesisRequest("A short sentence to warm up the allocator."), timeout=120)
    status = client.status()

    def state() -> EngineState:
        return EngineState(0, None, status.worker_pid)

    sampler = TelemetrySampler(NvmlSampler(), HostSampler(), state)
    sampler.push_allocator(client.allocator_stats())
    sample = sampler.sample_once()
    smi = _smi_used_by(status.worker_pid)
    torch_now = client.allocator_stats()
    assert sample.worker_gpu_used is not None
    assert abs(sample.worker_gpu_used - smi) <= 2 * MIB  # nvidia-smi rounds to MiB
    assert sample.allocator is not None
    assert sample.allocator.reserved == torch_now.reserved  # idle worker: nothing moved between the two reads
    assert sample.allocator.allocated == torch_now.allocated
    print(
        f"\nNVML worker {sample.worker_gpu_used / MIB:.0f} MiB, nvidia-smi {smi / MIB:.0f} MiB, "
        f"torch reserved {torch_now.reserved / MIB:.1f} MiB, allocated {torch_now.allocated / MIB:.1f} MiB"
    )


def test_clean_cache_lowers_reserved_after_a_burst(client: EngineClient) -> None:
    for text in LONG_TEXTS:
        client.synthesize(SynthesisRequest(text, seed=1), timeout=300)
    report = client.clean_cache()
    print(
        f"\nclean cache: reserved {report.before.reserved / MIB:.1f} -> {report.after.reserved / MIB:.1f} MiB, "
        f"cleared {report.cleared}"
    )
    assert report.after.reserved < report.before.reserved
    assert report.after.cached_free <= 32 * MIB  # little beyond page rounding stays cached
    assert any("empty_cache" in item for item in report.cleared)


def test_soft_restart_returns_vram_to_baseline(client: EngineClient) -> None:
    fresh = client.soft_restart()
    baseline = _worker_vram(fresh.new_pid)
    for text in LONG_TEXTS:
        client.synthesize(SynthesisRequest(text, seed=2), timeout=300)
    grown = _worker_vram(client.status().worker_pid)
    report = client.soft_restart()
    time.sleep(0.5)
    after = _worker_vram(report.new_pid)
    print(
        f"\nsoft restart: VRAM fresh {baseline / MIB:.0f} MiB, after burst {grown / MIB:.0f} MiB, "
        f"after restart {after / MIB:.0f} MiB, ready in {report.time_to_ready_s:.1f} s"
    )
    assert abs(after - baseline) <= 64 * MIB


def test_forced_oom_is_recovered_without_restart() -> None:
    import torch

    from voicelab.engine.core import EngineCore

    core = EngineCore(Settings(device="cuda", auto_clean=False, backend=BUILTIN_ON_GPU))
    text = " ".join(f"Sentence number {i} is here to make the batch long and wide." for i in range(24))
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    core.synthesize(SynthesisRequest(text, seed=3))
    full_peak = torch.cuda.max_memory_allocated() - base
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    core.synthesize(SynthesisRequest("Sentence number 1 is here to make the batch long and wide.", seed=3))
    piece_peak = torch.cuda.max_memory_allocated() - base
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(0).total_memory
    limit = base + (piece_peak + full_peak) / 2
    torch.cuda.set_per_process_memory_fraction(limit / total)
    ooms_before = torch.cuda.memory_stats().get("num_ooms", 0)
    try:
        result = core.synthesize(SynthesisRequest(text, seed=3))
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    ooms = torch.cuda.memory_stats().get("num_ooms", 0) - ooms_before
    print(
        f"\nOOM: full-batch peak {full_peak / MIB:.0f} MiB, one sentence {piece_peak / MIB:.0f} MiB, "
        f"limit {limit / MIB:.0f} MiB, OOMs {ooms}, recovered {result.duration_s:.1f} s of audio"
    )
    assert ooms >= 1, "the limit really forced an out-of-memory"
    assert result.duration_s > 20 and np.all(np.isfinite(result.audio))
    assert core.synthesize(SynthesisRequest("And the engine is still healthy.", seed=4)).duration_s > 1
