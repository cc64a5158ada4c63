"""The ring buffer keeps a bounded, time-ordered history that the panel can read while the sampler writes."""

from __future__ import annotations

import threading

from voicelab.telemetry.ring import RingBuffer
from voicelab.telemetry.samples import HostFigures, JobMarker, MemorySample

HOST = HostFigures(ui_pid=1, ui_rss=100, worker_pid=None, worker_rss=None, ram_used=1, ram_total=2, cpu_pct=0.0)


def sample(t: float) -> MemorySample:
    return MemorySample(timestamp=t, nvml=None, allocator=None, host=HOST)


def test_default_capacity_is_thirty_minutes_at_one_hertz() -> None:
    assert RingBuffer().capacity == 1800


def test_ring_keeps_only_the_newest_samples() -> None:
    ring = RingBuffer(capacity=5)
    for t in range(12):
        ring.append(sample(float(t)))
    assert len(ring) == 5
    assert [s.timestamp for s in ring.samples()] == [7.0, 8.0, 9.0, 10.0, 11.0]
    latest = ring.latest()
    assert latest is not None and latest.timestamp == 11.0


def test_since_returns_the_recent_window_oldest_first() -> None:
    ring = RingBuffer(capacity=100)
    for t in range(60):
        ring.append(sample(1000.0 + t))
    recent = ring.since(10, now=1059.0)
    assert [s.timestamp for s in recent] == [1000.0 + t for t in range(49, 60)]
    assert ring.since(0.5, now=2000.0) == []


def test_markers_are_bounded_and_windowed() -> None:
    ring = RingBuffer(capacity=3)
    for t in range(5):
        ring.add_marker(JobMarker(timestamp=float(t), job_id=f"job{t}", latency_s=0.5))
    assert [m.job_id for m in ring.markers_since(100, now=4.0)] == ["job2", "job3", "job4"]
    assert [m.job_id for m in ring.markers_since(1.5, now=4.0)] == ["job3", "job4"]


def test_empty_ring_has_no_latest() -> None:
    assert RingBuffer(capacity=3).latest() is None


def test_concurrent_writers_and_readers_never_exceed_capacity() -> None:
    ring = RingBuffer(capacity=50)
    errors: list[BaseException] = []

    def write(offset: int) -> None:
        for t in range(2000):
            ring.append(sample(offset + t))

    def read() -> None:
        try:
            for _ in range(500):
                assert len(ring.since(1e9, now=1e9)) <= 50
        except AssertionError as err:
            errors.append(err)

    threads = [threading.Thread(target=write, args=(i * 10000,)) for i in range(3)] + [threading.Thread(target=read)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(ring) == 50
