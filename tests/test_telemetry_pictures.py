"""Panel pictures render real figures; gauge strings are what a user reads."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from voicelab.engine.messages import AllocatorStats, MemoryBlock, MemorySegment, SegmentSnapshot
from voicelab.telemetry.pictures import (
    STATE_COLOURS,
    format_bytes,
    format_percent,
    panel_summary,
    segment_map_figure,
    timeline_figure,
    to_png_bytes,
)
from voicelab.telemetry.samples import HostFigures, JobMarker, MemorySample, NvmlFigures, ProcessGpuMemory

MiB = 1024**2
GiB = 1024**3


def colour_mask(image: Image.Image, hex_colour: str) -> np.ndarray:
    rgb = np.asarray(image.convert("RGB")).astype(int)
    target = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)])
    return np.asarray(np.abs(rgb - target).sum(axis=2) <= 6)


def colour_pixels(image: Image.Image, hex_colour: str) -> int:
    return int(colour_mask(image, hex_colour).sum())


def host(worker_rss: int | None = 300 * MiB) -> HostFigures:
    return HostFigures(
        ui_pid=10,
        ui_rss=200 * MiB,
        worker_pid=11,
        worker_rss=worker_rss,
        ram_used=8 * GiB,
        ram_total=32 * GiB,
        cpu_pct=12.0,
    )


def test_format_bytes_uses_binary_units() -> None:
    assert format_bytes(0) == "0 B"
    assert format_bytes(1023) == "1023 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(370 * MiB) == "370.0 MiB"
    assert format_bytes(int(2.5 * GiB)) == "2.5 GiB"
    assert format_bytes(-2 * MiB) == "-2.0 MiB"
    assert format_bytes(None) == "—"
    assert format_percent(0.123, 1) == "12.3 %"


def test_segment_map_shows_allocated_and_free_shares_to_scale() -> None:
    segment = MemorySegment(
        address=0x7F0000000000,
        total_size=64 * MiB,
        segment_type="large",
        blocks=(MemoryBlock(48 * MiB, "active_allocated"), MemoryBlock(16 * MiB, "inactive")),
    )
    snapshot = SegmentSnapshot(device="cuda:0", segments=(segment,))
    image = segment_map_figure(snapshot)
    png = to_png_bytes(image)
    assert png.startswith(b"\x89PNG")
    reopened = Image.open(io.BytesIO(png))
    width, height = reopened.size
    assert 600 <= width <= 1600 and 100 <= height <= 1600
    allocated = colour_mask(image, STATE_COLOURS["active_allocated"])
    free = colour_mask(image, STATE_COLOURS["inactive"])
    bar_rows = allocated.sum(axis=1) > 100  # rows through the bar, not the legend swatches
    allocated_columns = int(allocated[bar_rows].any(axis=0).sum())
    free_columns = int(free[bar_rows].any(axis=0).sum())
    assert free_columns > 0
    assert 2.7 < allocated_columns / free_columns < 3.3, (allocated_columns, free_columns)  # 48 MiB vs 16 MiB


def test_segment_map_grows_with_segments_and_caps_what_it_draws() -> None:
    segments = tuple(
        MemorySegment(
            address=i * 2 * MiB, total_size=2 * MiB, segment_type="small", blocks=(MemoryBlock(2 * MiB, "inactive"),)
        )
        for i in range(100)
    )
    few = segment_map_figure(SegmentSnapshot(device="cuda:0", segments=segments[:3]))
    many = segment_map_figure(SegmentSnapshot(device="cuda:0", segments=segments), max_segments=40)
    assert many.size[1] > few.size[1]
    assert many.size[1] <= 1600


def test_empty_snapshot_says_no_cuda_segments() -> None:
    image = segment_map_figure(SegmentSnapshot(device="cpu", segments=()))
    assert image.size[0] >= 300
    assert colour_pixels(image, STATE_COLOURS["active_allocated"]) == 0


def gpu_sample(t: float, allocated: int, reserved: int) -> MemorySample:
    nvml = NvmlFigures(
        name="H200",
        index=0,
        total=140 * GiB,
        used=reserved + GiB,
        free=140 * GiB - reserved - GiB,
        utilisation_pct=40.0,
        temperature_c=45.0,
        power_w=250.0,
        processes=(ProcessGpuMemory(pid=11, used=reserved + 600 * MiB),),
    )
    stats = AllocatorStats(
        device="cuda:0", allocated=allocated, reserved=reserved, non_releasable=64 * MiB, timestamp=t
    )
    return MemorySample(timestamp=t, nvml=nvml, allocator=stats, host=host(), queue_length=1, job_in_flight="abc")


def test_timeline_draws_gpu_lines_and_job_markers() -> None:
    samples = [gpu_sample(1000.0 + t, (300 + t) * MiB, 500 * MiB) for t in range(0, 600, 1)]
    markers = [JobMarker(timestamp=1000.0 + t, job_id=f"j{t}", latency_s=0.3) for t in range(0, 600, 60)]
    with_markers = timeline_figure(samples, markers, minutes=10)
    without = timeline_figure(samples, [], minutes=10)
    assert with_markers.size == without.size
    assert 600 <= with_markers.size[0] <= 1600
    # the job markers are visible: the two pictures differ
    assert np.any(np.asarray(with_markers.convert("RGB")) != np.asarray(without.convert("RGB")))


def test_timeline_without_gpu_uses_host_rss_and_empty_input_renders() -> None:
    samples = [MemorySample(timestamp=float(t), nvml=None, allocator=None, host=host()) for t in range(30)]
    assert timeline_figure(samples, []).size[0] >= 600
    assert timeline_figure([], []).size[0] >= 300


def test_panel_summary_reads_like_a_gauge() -> None:
    sample = gpu_sample(1000.0, allocated=300 * MiB, reserved=428 * MiB)
    summary = panel_summary(sample)
    assert summary["GPU"] == "H200 (#0)"
    assert summary["allocated"] == "300.0 MiB"
    assert summary["cached free"] == "128.0 MiB"
    assert summary["fragmentation"] == "50.0 %"  # 64 MiB non-releasable of 128 MiB cached free
    assert summary["outside PyTorch"] == "600.0 MiB"
    assert summary["system RAM"] == "8.0 GiB of 32.0 GiB"
    assert summary["in flight"] == "abc"


def test_panel_summary_without_gpu_or_worker() -> None:
    sample = MemorySample(
        timestamp=5.0, nvml=None, allocator=None, host=host(worker_rss=None), nvml_note="no NVIDIA GPU"
    )
    summary = panel_summary(sample)
    assert summary["GPU"] == "no NVIDIA GPU"
    assert summary["allocator"] == "waiting for the worker"
    assert summary["worker RSS"] == "—"
    assert summary["in flight"] == "idle"
    assert panel_summary(None) == {"status": "no samples yet"}
