"""The resource panel beside every tab: live gauges, a memory timeline and the engine's repair buttons.

Gauges come from the telemetry ring buffer (NVML, allocator, host), which the sampler fills in the
background, plus ``EngineClient.status()``; neither blocks on the worker. Without telemetry the panel
shows what the engine status alone knows. "Clean cache", "Soft restart" and "Inspect memory" run in the
worker between jobs and are shown as before → after.
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Protocol

import gradio as gr
from PIL import Image

from voicelab.backends.base import GraphBucket
from voicelab.engine.api import Engine
from voicelab.engine.messages import AllocatorStats, CleanReport
from voicelab.engine.status import EngineStatus, QueueView, RestartReport
from voicelab.engine.validation import as_bool
from voicelab.telemetry.pictures import format_bytes, format_percent, panel_summary, segment_map_figure, timeline_figure
from voicelab.telemetry.ring import RingBuffer
from voicelab.telemetry.samples import MemorySample
from voicelab.ui.handlers import shows_errors
from voicelab.ui.i18n import t
from voicelab.ui.progress import first_words

TIMELINE_MINUTES = 10.0
RESTART_POLL_S = 1.0
CPU_NOTE = (
    "The worker runs on the CPU: there is no CUDA device, so no GPU memory, allocator reserve or fragmentation "
    "to show. Host RAM and the worker's RSS are its memory."
)
CPU_INSPECT = (
    "**No device allocator on CPU.** The worker runs on the CPU, where PyTorch keeps no caching allocator, "
    "so there are no segments to map; its memory is the worker RSS in the panel above."
)
CUDA_ROWS = frozenset(
    {
        "allocated", "reserved", "cached free", "non-releasable", "fragmentation", "largest free block",
        "peak allocated", "alloc retries", "OOMs", "worker on GPU", "outside PyTorch",
    }
)  # fmt: skip


class TelemetrySource(Protocol):
    """What the panel reads: ``TelemetrySampler`` (its ring buffer), optionally ``mark_job``."""

    ring: RingBuffer


@dataclass(frozen=True)
class PanelView:
    gauges: gr.HTML
    timeline: gr.Image
    clear_profiles: gr.Checkbox
    clean: gr.Button
    force: gr.Checkbox
    restart: gr.Button
    report: gr.Markdown
    inspect: gr.Button
    segments: gr.Image
    fast_timer: gr.Timer
    slow_timer: gr.Timer


def panel_layout() -> PanelView:
    gr.Markdown(t("resources"))
    gauges = gr.HTML(elem_id="panel-gauges", apply_default_css=False)
    timeline = gr.Image(label=t("timeline"), format="png", interactive=False, height=230, elem_id="panel-timeline")
    with gr.Row():
        clear_profiles = gr.Checkbox(label=t("clear_profiles"), elem_id="panel-clear-profiles")
        clean = gr.Button(t("clean"), size="sm", elem_id="panel-clean")
    with gr.Row():
        force = gr.Checkbox(label=t("force"), elem_id="panel-force")
        restart = gr.Button(t("restart"), size="sm", variant="stop", elem_id="panel-restart")
    report = gr.Markdown(elem_id="panel-report")
    inspect = gr.Button(t("inspect"), size="sm", elem_id="panel-inspect")
    segments = gr.Image(label=t("segments"), format="png", interactive=False, visible=False, elem_id="panel-segments")
    return PanelView(
        gauges, timeline, clear_profiles, clean, force, restart, report, inspect, segments, gr.Timer(1.0), gr.Timer(5.0)
    )


def _gauge(label: str, text: str, fraction: float | None) -> str:
    bar = ""
    if fraction is not None:
        width = f"{min(max(fraction, 0.0), 1.0) * 100:.1f}%"
        bar = f'<div class="vl-gauge-bar"><div class="vl-gauge-fill" style="width:{width}"></div></div>'
    return (
        f'<div class="vl-gauge" data-gauge="{html.escape(label)}"><div class="vl-gauge-label">'
        f"<span>{html.escape(label)}</span><span>{html.escape(text)}</span></div>{bar}</div>"
    )


def _share(part: float | None, whole: float | None) -> float | None:
    return None if part is None or not whole else part / whole


def _bars(sample: MemorySample | None, stats: AllocatorStats | None, on_cpu: bool) -> list[str]:
    """The few figures worth a bar: device memory, PyTorch reserve, fragmentation (CUDA only), RAM, CPU."""
    bars: list[str] = []
    nvml = sample.nvml if sample else None
    total = nvml.total if nvml else None
    if on_cpu:
        stats = None  # no CUDA allocator: its rows would read 0 B, which says nothing true
    if nvml is not None:
        bars.append(
            _gauge("device memory", f"{format_bytes(nvml.used)} / {format_bytes(nvml.total)}", nvml.used / nvml.total)
        )
    if stats is not None:
        reserved = f"{format_bytes(stats.allocated)} allocated / {format_bytes(stats.reserved)} reserved"
        bars.append(
            _gauge(
                "PyTorch", reserved, _share(stats.reserved, total) if total else _share(stats.allocated, stats.reserved)
            )
        )
        bars.append(_gauge("fragmentation", format_percent(stats.fragmentation, 1), stats.fragmentation))
    if sample is not None:
        host = sample.host
        bars.append(
            _gauge(
                "system RAM",
                f"{format_bytes(host.ram_used)} / {format_bytes(host.ram_total)}",
                host.ram_used / host.ram_total,
            )
        )
        bars.append(_gauge("CPU", f"{host.cpu_pct:.0f} %", host.cpu_pct / 100))
    return bars


def _engine_line(status: EngineStatus, view: QueueView) -> str:
    worker = status.worker
    state = "ready" if status.ready else ("failed to load" if status.load_error else "starting")
    if status.ready and not status.model_loaded:
        state = "ready (model offloaded while idle; the next job loads it)"
    if view.in_flight_text:
        state = f"running {first_words(view.in_flight_text)} for {view.in_flight_s:.0f} s"
    where = f"{worker.backend} on {worker.device} ({worker.dtype})" if worker else "worker starting"
    if worker is None and status.load_error:
        where = "no worker (the model failed to load)"
    cache = status.profile_cache
    profiles = (
        f" · voice profiles {cache.size}/{cache.capacity}, hit rate {cache.hit_rate:.0%}" if cache is not None else ""
    )
    if cache is not None and cache.fitted_voices:
        profiles += f" · fitted voices {cache.fitted_voices} ({cache.fitted_bytes / 2**10:.0f} KiB)"
    if cache is not None and cache.judge_bytes:
        profiles += f" · similarity judge {cache.judge_bytes / 2**20:.0f} MiB"
    return (
        f"engine {state} · {where} · worker pid {status.worker_pid or '—'} · queue {status.queue_length} · "
        f"{status.completed} done, {status.failed} failed · restarts {status.restarts}{profiles}"
    )


def speed_line(status: EngineStatus) -> str:
    """Recent jobs' time to first audio and batch sizes, and the CUDA graph buckets with their memory."""
    parts = []
    speed = status.speed
    if speed is not None:
        parts.append(
            f"time to first audio {speed.first_audio_p50_s * 1000:.0f} ms median of {speed.jobs} "
            f"(last {speed.first_audio_last_s * 1000:.0f} ms) · batch {speed.mean_batch:.1f} mean, "
            f"{speed.largest_batch} largest"
        )
    if status.graphs:
        kept = [b for b in status.graphs if b.kept]
        memory = format_bytes(sum(b.bytes for b in status.graphs))
        parts.append(f"CUDA graphs {len(kept)}/{len(status.graphs)} kept ({_graph_shapes(kept)}) · {memory}")
    return " · ".join(parts)


def _graph_shapes(kept: list[GraphBucket]) -> str:
    """Each stage's kept shapes (rows x length), or their count where a stage has many (the LLM's 25 steps)."""
    stages: dict[str, list[str]] = {}
    for bucket in kept:
        stages.setdefault(bucket.stage, []).append(f"{bucket.rows}x{bucket.length}")
    return ", ".join(f"{stage} {' '.join(shapes)}" if len(shapes) <= 4 else f"{stage} {len(shapes)} shapes"
                     for stage, shapes in stages.items()) or "none faster than eager"  # fmt: skip


class ResourcePanel:
    """Handlers of the panel; cheap reads on every tick, worker round-trips only on button presses."""

    def __init__(self, engine: Engine, telemetry: TelemetrySource | None) -> None:
        self.engine = engine
        self.telemetry = telemetry
        self._timeline_lock = threading.Lock()
        self._timeline: tuple[float, Image.Image] | None = None

    def _latest(self) -> MemorySample | None:
        return self.telemetry.ring.latest() if self.telemetry is not None else None

    def gauges(self) -> str:
        """The gauges' HTML, refreshed every second; a CPU worker shows no CUDA rows, and says once why."""
        status, view = self.engine.status(), self.engine.queue_view()
        sample = self._latest()
        stats = sample.allocator if sample and sample.allocator else status.last_stats
        on_cpu = worker_on_cpu(status, stats)
        rows = panel_summary(sample) if sample is not None else _summary_from(stats)
        rows = cpu_rows(rows) if on_cpu else rows
        if "in flight" in rows:
            rows["in flight"] = first_words(view.in_flight_text) if view.in_flight_text else "idle"
        figures = "".join(f"<span>{html.escape(k)}</span><b>{html.escape(v)}</b>" for k, v in rows.items())
        notes = [status.load_error, status.leak_warning]
        warning = "".join(f'<p class="vl-warning">⚠ {html.escape(n)}</p>' for n in notes if n)
        cpu_note = f'<p class="vl-muted" id="panel-cpu-note">{html.escape(CPU_NOTE)}</p>' if on_cpu else ""
        updated = time.strftime("%H:%M:%S")
        return (
            f'<div class="vl-panel" data-updated="{updated}">{"".join(_bars(sample, stats, on_cpu))}{warning}'
            f'{cpu_note}<p class="vl-muted" id="panel-engine-line">{html.escape(_engine_line(status, view))}</p>'
            f'<p class="vl-muted vl-speed">{html.escape(speed_line(status))}</p>'
            f'<div class="vl-summary">{figures}</div><p class="vl-muted">updated {updated}</p></div>'
        )

    def timeline(self) -> Image.Image | None:
        """The memory timeline; drawn once per new sample however many browser tabs ask for it."""
        latest = self._latest()
        if self.telemetry is None or latest is None:
            return None
        with self._timeline_lock:
            if self._timeline is None or self._timeline[0] != latest.timestamp:
                ring, seconds = self.telemetry.ring, TIMELINE_MINUTES * 60
                picture = timeline_figure(ring.since(seconds), ring.markers_since(seconds), minutes=TIMELINE_MINUTES)
                self._timeline = (latest.timestamp, picture)
            return self._timeline[1]

    @shows_errors
    def clean_cache(self, clear_profiles: bool) -> str:
        report = self.engine.clean_cache(as_bool("Also clear speaker profiles", clear_profiles))
        return clean_report_text(report)

    @shows_errors
    def soft_restart(self, force: bool) -> Iterator[str]:
        """Says what it waits for (the job in flight, by its first words) and for how long, then the report."""
        forced = as_bool("Force", force)
        started, running = time.monotonic(), self.engine.queue_view().in_flight_text
        with ThreadPoolExecutor(1, thread_name_prefix="voicelab-restart") as pool:
            future = pool.submit(self.engine.soft_restart, force=forced)
            while True:
                try:
                    report = future.result(timeout=RESTART_POLL_S)
                    break
                except FutureTimeout:
                    yield restart_waiting_line(self.engine.queue_view(), forced, time.monotonic() - started)
        yield restart_report_text(report, running)

    @shows_errors
    def inspect_memory(self) -> tuple[dict[str, Any], str]:
        """The segment map (shown from the first press on) and a one-line summary; on CPU, why there is none."""
        snapshot = self.engine.memory_snapshot()
        if snapshot.device.startswith("cpu"):
            return gr.update(value=None, visible=False), CPU_INSPECT
        reserved = sum(s.total_size for s in snapshot.segments)
        text = (
            f"**{len(snapshot.segments)} segments** on {snapshot.device}, {format_bytes(reserved)} reserved, "
            f"largest free block {format_bytes(snapshot.largest_free_block)}"
        )
        return gr.update(value=segment_map_figure(snapshot), visible=True), text


def restart_waiting_line(view: QueueView, force: bool, waited_s: float) -> str:
    """While a soft restart is pending: the job it waits for, by its first words, and for how long."""
    if view.in_flight_text and not force:
        return (
            f"**Soft restart** is waiting for the job in flight, {first_words(view.in_flight_text)}, to finish: "
            f"{waited_s:.0f} s so far (tick force to requeue it and restart now)."
        )
    return f"**Soft restart**: starting a new worker… {waited_s:.0f} s so far."


def restart_report_text(report: RestartReport, requeued_text: str = "") -> str:
    lines = [
        f"**Soft restart** ({'forced' if report.forced else 'after the job in flight'}): "
        f"worker {report.old_pid or '—'} → {report.new_pid}, ready in {report.time_to_ready_s:.1f} s",
        *_compare(report.before, report.after),
    ]
    if report.requeued_job:
        job = first_words(requeued_text) if requeued_text else f"job {report.requeued_job}"
        lines.append(f"- {job} was requeued and will run on the new worker")
    return "\n".join(lines)


def worker_on_cpu(status: EngineStatus, stats: AllocatorStats | None) -> bool:
    """The worker's device is the CPU (from its READY, else from its allocator report)."""
    device = status.worker.device if status.worker else (stats.device if stats else "")
    return device.startswith("cpu")


def cpu_rows(rows: dict[str, str]) -> dict[str, str]:
    """The summary without the CUDA allocator's rows, which mean nothing for a CPU worker."""
    kept = {k: v for k, v in rows.items() if k not in CUDA_ROWS}
    if "allocator" in kept:
        kept["allocator"] = "none (CPU worker)"
    return kept


def _summary_from(stats: AllocatorStats | None) -> dict[str, str]:
    if stats is None:
        return {"allocator": "waiting for the worker"}
    return {
        "allocator": stats.device,
        "allocated": format_bytes(stats.allocated),
        "reserved": format_bytes(stats.reserved),
        "fragmentation": format_percent(stats.fragmentation, 1),
        "worker RSS": format_bytes(stats.worker_rss),
    }


def _compare(before: AllocatorStats | None, after: AllocatorStats | None) -> list[str]:
    """Before → after lines of the figures a clean or restart changes ("—" where a side is unknown).

    A CPU worker has no CUDA allocator: only its host figure is shown.
    """
    figures = [
        ("worker RSS", lambda s: format_bytes(s.worker_rss)),  # host memory first: it is all a CPU box has
        ("reserved", lambda s: format_bytes(s.reserved)),
        ("allocated", lambda s: format_bytes(s.allocated)),
        ("cached free", lambda s: format_bytes(s.cached_free)),
        ("fragmentation", lambda s: format_percent(s.fragmentation, 1)),
    ]
    if any(s is not None and s.device.startswith("cpu") for s in (before, after)):
        figures = [f for f in figures if f[0] not in CUDA_ROWS]
    return [
        f"- {name}: {'—' if before is None else show(before)} → {'—' if after is None else show(after)}"
        for name, show in figures
    ]


def clean_report_text(report: CleanReport) -> str:
    cleared = ", ".join(report.cleared) or "nothing"
    return "\n".join(
        [
            f"**Clean cache** in {report.duration_s * 1000:.0f} ms (cleared: {cleared})",
            *_compare(report.before, report.after),
        ]
    )
