"""Allocator figures, cleaning and OOM retry against a real CUDA device (skipped without one)."""

from __future__ import annotations

import os

import pytest
import torch

from voicelab.engine import memory
from voicelab.telemetry.nvml import NvmlSampler

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

MiB = 1024**2


@pytest.fixture
def device() -> str:
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return "cuda:0"


def test_allocator_stats_agree_with_torch(device: str) -> None:
    keep = [torch.empty(n * MiB, dtype=torch.uint8, device=device) for n in (3, 17, 64)]
    stats = memory.allocator_stats(device)
    raw = torch.cuda.memory_stats(device)
    assert stats.allocated == raw["allocated_bytes.all.current"] == torch.cuda.memory_allocated(device)
    assert stats.reserved == raw["reserved_bytes.all.current"] == torch.cuda.memory_reserved(device)
    assert stats.non_releasable == raw["inactive_split_bytes.all.current"]
    assert stats.peak_allocated == raw["allocated_bytes.all.peak"]
    assert stats.allocated >= 84 * MiB
    assert stats.worker_pid == os.getpid() and stats.worker_rss > 0
    del keep


def test_segment_snapshot_adds_up_to_reserved(device: str) -> None:
    keep = [torch.empty(n * MiB, dtype=torch.uint8, device=device) for n in (1, 5, 40)]
    snapshot = memory.segment_snapshot(device)
    assert sum(s.total_size for s in snapshot.segments) == torch.cuda.memory_reserved(device)
    allocated = sum(b.size for s in snapshot.segments for b in s.blocks if b.state == "active_allocated")
    assert allocated == torch.cuda.memory_allocated(device)
    del keep


def test_clean_lowers_reserved_after_a_burst_of_varied_allocations(device: str) -> None:
    generator = torch.Generator().manual_seed(0)
    keep = []
    for i in range(200):  # variable-length inputs: sizes from 64 KiB to 48 MiB, every tenth one kept alive
        size = int(torch.randint(64 * 1024, 48 * MiB, (1,), generator=generator))
        tensor = torch.empty(size, dtype=torch.uint8, device=device)
        if i % 10 == 0:
            keep.append(tensor)
    spectrum = torch.fft.rfft(torch.randn(3, 48_000, device=device))  # fills the cuFFT plan cache
    del spectrum, tensor
    report = memory.clean_device_cache(device)
    assert report.after.reserved < report.before.reserved
    # Live tensors are untouched; only library workspaces (cuBLAS) may leave the allocated figure.
    assert sum(t.numel() for t in keep) <= report.after.allocated <= report.before.allocated
    assert "cuFFT plan cache" in report.cleared and "CUDA cached blocks (empty_cache)" in report.cleared
    assert torch.backends.cuda.cufft_plan_cache[0].size == 0
    del keep


def test_a_real_oom_is_retried_in_pieces_and_counted(device: str) -> None:
    monitor = memory.AllocatorMonitor(device)
    monitor.sample()
    total = torch.cuda.get_device_properties(0).total_memory

    def full() -> int:
        return int(torch.empty(2 * total, dtype=torch.uint8, device=device).numel())

    def pieces() -> int:
        return sum(int(torch.empty(MiB, dtype=torch.uint8, device=device).numel()) for _ in range(4))

    cleaned: list[str] = []
    result = memory.run_with_oom_retry(full, pieces, lambda: cleaned.append(device), on_retry=cleaned.append)
    assert result == 4 * MiB
    assert cleaned[0] == device and "out of memory" in cleaned[1].lower()
    assert monitor.sample().ooms >= 1


def test_nvml_sees_this_process_using_at_least_what_torch_reserved(device: str) -> None:
    keep = torch.empty(256 * MiB, dtype=torch.uint8, device=device)
    with NvmlSampler(torch.cuda.current_device()) as nvml:
        figures = nvml.sample(pids=[os.getpid()])
    assert figures is not None and figures.total > figures.used > 0
    used = figures.used_by(os.getpid())
    if used is None:
        pytest.skip("NVML lists processes from another pid namespace (container)")
    assert used >= torch.cuda.memory_reserved(device)
    del keep


def test_cufft_plans_are_reused_per_length_and_stay_within_a_cap(device: str) -> None:
    """One plan per length: a length seen before reuses its plan (rebuilding them under a small cap grew the
    worker's RSS), and however many lengths come, the cache never holds more than its cap."""
    cache = torch.backends.cuda.cufft_plan_cache[0]
    default = cache.max_size
    window = torch.hann_window(400, device=device)

    def spectra(lengths: range) -> None:
        for n in lengths:
            torch.stft(torch.randn(n, device=device), 400, 160, window=window, return_complex=True)

    try:
        cache.clear()
        memory.cap_plan_cache(device)
        assert cache.max_size == memory.CUFFT_PLAN_CACHE_SIZE
        lengths = range(4000, 4000 + 50 * 160, 160)  # 50 frame counts, one plan each
        spectra(lengths)
        held = cache.size
        spectra(lengths)
        assert 0 < held == cache.size <= 50
        memory.cap_plan_cache(device, 16)
        spectra(range(40_000, 40_000 + 200 * 160, 160))
        assert 0 < cache.size <= 16
    finally:
        cache.max_size = default
        cache.clear()
