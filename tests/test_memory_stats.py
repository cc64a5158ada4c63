"""Worker-side allocator figures, segment maps, cache cleaning and allocator settings (CPU paths and fakes)."""

from __future__ import annotations

import gc
import os
import weakref
from typing import Any

import numpy as np
import pytest
import torch

from voicelab.engine import memory
from voicelab.engine.messages import AllocatorStats

MiB = 1024**2


def test_allocator_stats_on_cpu_are_zero_but_name_the_real_worker() -> None:
    stats = memory.allocator_stats("cpu")
    assert stats.device == "cpu"
    assert (stats.allocated, stats.reserved, stats.non_releasable, stats.peak_allocated) == (0, 0, 0, 0)
    assert (stats.alloc_retries, stats.ooms) == (0, 0)
    assert stats.worker_pid == os.getpid()
    assert stats.worker_rss > 10 * MiB


def test_fragmentation_is_non_releasable_over_cached_free() -> None:
    stats = AllocatorStats(device="cuda:0", allocated=300 * MiB, reserved=500 * MiB, non_releasable=50 * MiB)
    assert stats.cached_free == 200 * MiB
    assert stats.fragmentation == pytest.approx(0.25)
    nothing_cached = AllocatorStats(device="cuda:0", allocated=500 * MiB, reserved=500 * MiB, non_releasable=0)
    assert nothing_cached.cached_free == 0 and nothing_cached.fragmentation == 0.0


def fake_cuda(monkeypatch: pytest.MonkeyPatch, stats: dict[str, int]) -> None:
    """Route memory.py's CUDA reads to ``stats`` so the CUDA arithmetic runs on a CPU-only machine."""
    monkeypatch.setattr(memory, "_cuda_device", lambda device: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: dict(stats))


def test_retries_and_ooms_are_deltas_between_monitor_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = {
        "allocated_bytes.all.current": 300 * MiB,
        "reserved_bytes.all.current": 512 * MiB,
        "inactive_split_bytes.all.current": 20 * MiB,
        "allocated_bytes.all.peak": 450 * MiB,
        "num_alloc_retries": 4,
        "num_ooms": 1,
    }
    fake_cuda(monkeypatch, raw)
    monitor = memory.AllocatorMonitor("cuda:0")
    first = monitor.sample()
    assert (first.allocated, first.reserved, first.non_releasable, first.peak_allocated) == (
        300 * MiB,
        512 * MiB,
        20 * MiB,
        450 * MiB,
    )
    assert (first.alloc_retries, first.ooms) == (4, 1)  # counted from worker start
    assert monitor.sample().alloc_retries == 0  # nothing happened since
    raw.update(num_alloc_retries=7, num_ooms=3)
    third = monitor.sample()
    assert (third.alloc_retries, third.ooms) == (3, 2)
    assert third.device == "cuda:0"


def test_segment_snapshot_keeps_segments_blocks_and_states(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = [
        {
            "device": 0,
            "address": 2000,
            "total_size": 20 * MiB,
            "segment_type": "large",
            "blocks": [{"size": 12 * MiB, "state": "active_allocated"}, {"size": 8 * MiB, "state": "inactive"}],
        },
        {"device": 1, "address": 10, "total_size": 2 * MiB, "segment_type": "small", "blocks": []},
        {
            "device": 0,
            "address": 1000,
            "total_size": 2 * MiB,
            "segment_type": "small",
            "blocks": [{"size": 2 * MiB, "state": "inactive"}],
        },
    ]
    monkeypatch.setattr(memory, "_cuda_device", lambda device: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "memory_snapshot", lambda **kwargs: raw)
    snapshot = memory.segment_snapshot("cuda:0")
    assert [s.address for s in snapshot.segments] == [1000, 2000]  # other devices dropped, sorted by address
    assert [b.state for b in snapshot.segments[1].blocks] == ["active_allocated", "inactive"]
    assert snapshot.largest_free_block == 8 * MiB


def test_segment_snapshot_on_cpu_is_empty() -> None:
    snapshot = memory.segment_snapshot("cpu")
    assert snapshot.segments == () and snapshot.largest_free_block == 0


class Cycle:
    def __init__(self) -> None:
        self.payload = np.ones(4 * MiB, dtype=np.uint8)
        self.me = self


def test_clean_on_cpu_runs_extras_first_collects_garbage_and_says_only_what_it_did() -> None:
    order: list[str] = []
    cycle = Cycle()
    alive = weakref.ref(cycle)
    del cycle
    gc.disable()  # keep the automatic collector from doing the job for us
    try:
        report = memory.clean_device_cache("cpu", [("speaker profiles", lambda: order.append("profiles"))])
    finally:
        gc.enable()
    assert order == ["profiles"]
    assert alive() is None
    assert report.cleared[0] == "speaker profiles"
    assert report.cleared[1].startswith("Python garbage (")
    assert report.cleared[2].startswith("freed host heap returned to the OS (")
    assert len(report.cleared) == 3  # no CUDA steps claimed on CPU
    assert report.before.worker_pid == report.after.worker_pid == os.getpid()
    assert report.duration_s >= 0


def test_clean_on_cuda_clears_library_caches_before_emptying_the_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    fake_cuda(monkeypatch, {})

    class PlanCache:
        def clear(self) -> None:
            calls.append("cufft")

    class PlanCaches:
        def __getitem__(self, index: int) -> PlanCache:
            return PlanCache()

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append("sync"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    monkeypatch.setattr(torch.backends.cuda, "cufft_plan_cache", PlanCaches())
    monkeypatch.setattr(torch._C, "_cuda_clearCublasWorkspaces", lambda: calls.append("cublas"), raising=False)
    report = memory.clean_device_cache("cuda:0")
    assert calls == ["sync", "cufft", "cublas", "empty_cache"]
    assert report.cleared[1].startswith("freed host heap returned to the OS (")
    assert report.cleared[2:] == (
        "synchronised the device",
        "cuFFT plan cache",
        "cuBLAS workspaces",
        "CUDA cached blocks (empty_cache)",
    )


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, "expandable_segments:True"),
        ({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}, "max_split_size_mb:128"),
        ({"PYTORCH_ALLOC_CONF": "expandable_segments:False"}, "expandable_segments:False"),
        ({"PYTORCH_CUDA_ALLOC_CONF": "  "}, "expandable_segments:True"),
    ],
)
def test_configure_allocator_respects_the_users_choice(environ: dict[str, str], expected: str) -> None:
    env: dict[str, Any] = dict(environ)
    assert memory.configure_allocator(env) == expected
    user_set = {k: v for k, v in environ.items() if v.strip()}
    if user_set:
        assert env == environ  # untouched
    else:
        assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"


def test_previous_allocator_stats_are_refused_as_a_delta_base() -> None:
    """AllocatorStats carries deltas, so using one as the base would silently give wrong figures."""
    with pytest.raises(TypeError, match="AllocatorMonitor"):
        memory.allocator_stats("cpu", memory.allocator_stats("cpu"))  # type: ignore[arg-type]


def test_device_total_is_zero_on_cpu() -> None:
    assert memory.device_total("cpu") == 0


def test_separate_monitors_each_see_every_event(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = {"num_alloc_retries": 0, "num_ooms": 0}
    fake_cuda(monkeypatch, raw)
    heartbeat, hygiene = memory.AllocatorMonitor("cuda:0"), memory.AllocatorMonitor("cuda:0")
    heartbeat.sample(), hygiene.sample()
    raw["num_alloc_retries"] = 2
    assert heartbeat.sample().alloc_retries == 2
    assert hygiene.sample().alloc_retries == 2  # not swallowed by the heartbeat's read
