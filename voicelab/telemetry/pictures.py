"""Resource-panel pictures (memory timeline, allocator segment map) and human-readable gauge strings.

Figures are drawn with matplotlib's object API on the Agg canvas (no pyplot state, safe from any thread)
and returned as PIL images, which Gradio's Image component shows directly.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from PIL import Image

from voicelab.engine.messages import MemorySegment, SegmentSnapshot
from voicelab.telemetry.samples import JobMarker, MemorySample

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
_DASH = "—"
STATE_COLOURS = {
    "active_allocated": "#1f77b4",
    "active_awaiting_free": "#ff7f0e",
    "active_pending_free": "#ff7f0e",
    "inactive": "#d9d9d9",
}
STATE_LABELS = {"active_allocated": "allocated", "active_awaiting_free": "awaiting free", "inactive": "free (inactive)"}
_DPI = 100


def format_bytes(n: float | None) -> str:
    """``1536`` → ``"1.5 KiB"``; ``None`` → ``"—"``. Binary units, as the allocator counts."""
    if n is None:
        return _DASH
    value = float(n)
    sign = "-" if value < 0 else ""
    value = abs(value)
    unit = 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    return f"{sign}{value:.0f} {_UNITS[unit]}" if unit == 0 else f"{sign}{value:.1f} {_UNITS[unit]}"


def format_percent(value: float | None, digits: int = 0) -> str:
    """A share in [0, 1] → ``"12 %"``."""
    return _DASH if value is None else f"{value * 100:.{digits}f} %"


def to_png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _render(fig: Figure) -> Image.Image:
    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=_DPI)
    buffer.seek(0)
    image = Image.open(buffer)
    image.load()
    return image


def _message_figure(text: str, width: float = 9.0, height: float = 2.0) -> Image.Image:
    fig = Figure(figsize=(width, height))
    ax = fig.add_subplot()
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=12, color="#555555")
    return _render(fig)


def _unit_for(values: Sequence[float]) -> tuple[str, float]:
    top = max((v for v in values if not math.isnan(v)), default=0.0)
    return ("GiB", 1024.0**3) if top >= 1024**3 else ("MiB", 1024.0**2)


def _series(samples: Sequence[MemorySample]) -> dict[str, list[float]]:
    """The lines to draw: device figures when any sample has them, else host RSS."""
    nan = float("nan")
    has_gpu = any(s.nvml is not None or (s.allocator is not None and s.allocator.reserved > 0) for s in samples)
    if has_gpu:
        return {
            "device used (NVML)": [nan if s.nvml is None else s.nvml.used for s in samples],
            "reserved (PyTorch)": [nan if s.allocator is None else s.allocator.reserved for s in samples],
            "allocated (PyTorch)": [nan if s.allocator is None else s.allocator.allocated for s in samples],
        }
    return {
        "UI process RSS": [float(s.host.ui_rss) for s in samples],
        "worker RSS": [nan if s.host.worker_rss is None else s.host.worker_rss for s in samples],
    }


def timeline_figure(
    samples: Sequence[MemorySample], markers: Sequence[JobMarker] = (), minutes: float = 10.0
) -> Image.Image:
    """Memory over the last ``minutes``: NVML used, PyTorch reserved and allocated, a tick per finished job.

    Without a GPU the host RSS of the UI and worker processes is drawn instead.
    """
    if not samples:
        return _message_figure("no samples yet")
    now = samples[-1].timestamp
    window = [s for s in samples if s.timestamp >= now - minutes * 60]
    series = _series(window)
    unit, scale = _unit_for([v for values in series.values() for v in values])
    x = [(s.timestamp - now) / 60 for s in window]
    fig = Figure(figsize=(9, 3.5))
    ax = fig.add_subplot()
    for label, values in series.items():
        ax.plot(x, [v / scale for v in values], label=label, linewidth=1.6)
    job_x = [(m.timestamp - now) / 60 for m in markers if now - minutes * 60 <= m.timestamp <= now + 1]
    for i, jx in enumerate(job_x):
        ax.axvline(jx, color="#888888", linewidth=0.7, alpha=0.6, label="job finished" if i == 0 else None)
    ax.set_xlim(-minutes, 0)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("minutes ago")
    ax.set_ylabel(unit)
    ax.grid(True, alpha=0.3)
    title = "GPU memory" if "reserved (PyTorch)" in series else "host memory (no GPU figures)"
    ax.set_title(title, fontsize=10)
    fig.legend(loc="lower center", fontsize=8, ncol=4, frameon=False)
    _margins(fig, left_in=0.75, bottom_in=0.9)
    return _render(fig)


def _margins(fig: Figure, left_in: float, bottom_in: float, top_in: float = 0.35, right_in: float = 0.2) -> None:
    """Fixed margins in inches (cheaper than tight_layout, which draws the whole figure once more)."""
    width, height = fig.get_figwidth(), fig.get_figheight()
    fig.subplots_adjust(
        left=left_in / width, right=1 - right_in / width, bottom=bottom_in / height, top=1 - top_in / height
    )


def _block_rectangles(shown: Sequence[MemorySegment]) -> tuple[list[list[tuple[float, float]]], list[str]]:
    """One rectangle per block, x as a share of its segment, y the segment's row."""
    rectangles: list[list[tuple[float, float]]] = []
    colours: list[str] = []
    for row, segment in enumerate(shown):
        offset, total = 0, max(segment.total_size, 1)
        for block in segment.blocks:
            x0, x1 = offset / total, (offset + block.size) / total
            rectangles.append([(x0, row - 0.38), (x1, row - 0.38), (x1, row + 0.38), (x0, row + 0.38)])
            colours.append(STATE_COLOURS.get(block.state, "#9467bd"))
            offset += block.size
    return rectangles, colours


def _label_largest_free(ax: Axes, shown: Sequence[MemorySegment], largest: int) -> None:
    for row, segment in enumerate(shown):
        offset = 0
        for block in segment.blocks:
            if block.state == "inactive" and block.size == largest:
                centre = (offset + block.size / 2) / max(segment.total_size, 1)
                ax.text(centre, row, f"largest free {format_bytes(largest)}", ha="center", va="center", fontsize=7)
                return
            offset += block.size


def segment_map_figure(snapshot: SegmentSnapshot, max_segments: int = 40) -> Image.Image:
    """One bar per allocator segment, its blocks coloured allocated / awaiting free / free; bars are scaled to
    their own segment (the size is on the axis), and the largest free block is labelled."""
    if not snapshot.segments:
        return _message_figure(f"no CUDA segments ({snapshot.device})")
    shown = sorted(sorted(snapshot.segments, key=lambda s: -s.total_size)[:max_segments], key=lambda s: s.address)
    fig = Figure(figsize=(9, min(1.6 + 0.3 * len(shown), 16)))
    ax = fig.add_subplot()
    rectangles, colours = _block_rectangles(shown)
    ax.add_collection(PolyCollection(rectangles, facecolors=colours, edgecolors="white", linewidths=0.3))
    if snapshot.largest_free_block > 0:
        _label_largest_free(ax, shown, snapshot.largest_free_block)
    ax.set_yticks(range(len(shown)), [f"{format_bytes(s.total_size)} {s.segment_type}" for s in shown], fontsize=7)
    ax.set_ylim(len(shown) - 0.5, -0.5)
    ax.set_xlim(0, 1)
    ax.set_xlabel("position within segment")
    ax.xaxis.set_major_formatter(lambda value, _pos: f"{value:.0%}")
    total_reserved = sum(s.total_size for s in snapshot.segments)
    hidden = len(snapshot.segments) - len(shown)
    extra = f", {hidden} more not shown" if hidden else ""
    ax.set_title(f"{len(snapshot.segments)} segments, {format_bytes(total_reserved)} reserved{extra}", fontsize=10)
    handles = [Patch(color=STATE_COLOURS[k], label=v) for k, v in STATE_LABELS.items()]
    fig.legend(handles=handles, loc="lower center", fontsize=7, ncol=3, frameon=False)
    _margins(fig, left_in=1.1, bottom_in=0.85)
    return _render(fig)


def _gpu_summary(sample: MemorySample) -> dict[str, str]:
    nvml = sample.nvml
    if nvml is None:
        return {"GPU": sample.nvml_note or "no NVIDIA GPU"}
    return {
        "GPU": f"{nvml.name} (#{nvml.index})",
        "device memory": f"{format_bytes(nvml.used)} used of {format_bytes(nvml.total)}",
        "device free": format_bytes(nvml.free),
        "driver reserved": format_bytes(nvml.reserved),
        "utilisation": _DASH if nvml.utilisation_pct is None else f"{nvml.utilisation_pct:.0f} %",
        "temperature": _DASH if nvml.temperature_c is None else f"{nvml.temperature_c:.0f} °C",
        "power": _DASH if nvml.power_w is None else f"{nvml.power_w:.0f} W",
        "worker on GPU": format_bytes(sample.worker_gpu_used),
        "outside PyTorch": format_bytes(sample.outside_pytorch),
    }


def _allocator_summary(sample: MemorySample) -> dict[str, str]:
    stats = sample.allocator
    if stats is None:
        return {"allocator": "waiting for the worker"}
    age = sample.allocator_age_s or 0.0
    return {
        "allocator": stats.device + (f" (last report {age:.0f} s ago)" if age >= 5 else ""),
        "allocated": format_bytes(stats.allocated),
        "reserved": format_bytes(stats.reserved),
        "cached free": format_bytes(stats.cached_free),
        "non-releasable": format_bytes(stats.non_releasable),
        "fragmentation": format_percent(stats.fragmentation, 1),
        "largest free block": format_bytes(stats.largest_free_block),
        "peak allocated": format_bytes(stats.peak_allocated),
        "alloc retries": str(stats.alloc_retries),
        "OOMs": str(stats.ooms),
    }


def panel_summary(sample: MemorySample | None) -> dict[str, str]:
    """Gauge name → human-readable value for the resource panel (ordered GPU, allocator, host, engine)."""
    if sample is None:
        return {"status": "no samples yet"}
    host = sample.host
    summary = _gpu_summary(sample) | _allocator_summary(sample)
    summary |= {
        "UI RSS": format_bytes(host.ui_rss),
        "worker RSS": format_bytes(host.worker_rss),
        "system RAM": f"{format_bytes(host.ram_used)} of {format_bytes(host.ram_total)}",
        "CPU": f"{host.cpu_pct:.0f} %",
        "queue": str(sample.queue_length),
        "in flight": sample.job_in_flight or "idle",
    }
    return summary
