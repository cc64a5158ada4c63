"""The resource panel's per-device tabs when the engine runs one worker per device (``--devices cuda:0,cuda:1``).

Each tab shows that device's gauges (NVML memory of its GPU, its worker's allocator figures, RSS, jobs,
restarts, speaker profiles) and has its own Clean cache and Soft restart; the panel's buttons above them act on
every device (a soft restart of all replaces the workers one after another, so the others keep serving).
With one worker nothing is added. Reads the engine status and NVML only; never waits on a worker per tick.
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import gradio as gr

from voicelab.engine.api import Engine
from voicelab.engine.status import WorkerStatus
from voicelab.telemetry.nvml import NvmlSampler
from voicelab.telemetry.pictures import format_bytes, format_percent
from voicelab.ui.handlers import shows_errors
from voicelab.ui.panel import PanelView, _compare, _gauge, clean_report_text


@dataclass(frozen=True)
class DeviceView:
    index: int
    gauges: gr.HTML
    clean: gr.Button
    restart: gr.Button


@dataclass
class DevicePanel:
    """Handlers of the per-device tabs; NVML is opened once per GPU named by a worker's device."""

    engine: Engine
    _nvml: dict[int, NvmlSampler] = field(default_factory=dict)

    def _gpu(self, device: str) -> NvmlSampler | None:
        if not device.startswith("cuda"):
            return None
        index = int(device.partition(":")[2] or 0)
        if index not in self._nvml:
            self._nvml[index] = NvmlSampler(index)
        return self._nvml[index]

    def _local_vram(self, worker: WorkerStatus) -> tuple[int, int] | None:
        gpu = self._gpu(worker.device)
        figures = gpu.sample((worker.pid,) if worker.pid else ()) if gpu is not None else None
        return (figures.used, figures.total) if figures is not None else None

    def gauges(self) -> list[str]:
        """One HTML block per worker, in order."""
        return [self._worker_html(worker) for worker in self.engine.status().workers]

    def _worker_html(self, worker: WorkerStatus) -> str:
        bars: list[str] = []
        vram = worker.vram if worker.name else self._local_vram(worker)  # a named replica measured its own GPU
        if vram is not None:
            used = f"{format_bytes(vram[0])} / {format_bytes(vram[1])}"
            bars.append(_gauge("device memory", used, vram[0] / vram[1]))
        stats = worker.last_stats
        if stats is not None:
            share = stats.reserved / vram[1] if vram else None
            alloc = f"{format_bytes(stats.allocated)} allocated / {format_bytes(stats.reserved)} reserved"
            bars.append(_gauge("PyTorch", alloc, share))
            bars.append(_gauge("fragmentation", format_percent(stats.fragmentation, 1), stats.fragmentation))
            bars.append(_gauge("worker RSS", format_bytes(stats.worker_rss), None))
        notes = [n for n in (worker.load_error, worker.leak_warning) if n]
        warning = "".join(f'<p class="vl-warning">⚠ {html.escape(n)}</p>' for n in notes)
        updated = time.strftime("%H:%M:%S")
        return (
            f'<div class="vl-panel" data-device="{html.escape(worker.label)}" data-state="{worker.state}" '
            f'data-updated="{updated}">{"".join(bars)}{warning}'
            f'<p class="vl-muted">{html.escape(worker_line(worker))}</p></div>'
        )

    @shows_errors
    def clean_cache(self, index: int, clear_profiles: bool) -> str:
        report = self.engine.clean_cache(bool(clear_profiles), worker=index)
        return clean_report_text(report).replace("**Clean cache**", f"**Clean cache on {report.after.device}**", 1)

    @shows_errors
    def soft_restart(self, index: int, force: bool) -> str:
        report = self.engine.soft_restart(force=bool(force), worker=index)
        lines = [
            f"**Soft restart of {report.device or index}** ({'forced' if report.forced else 'after its job'}): "
            f"worker {report.old_pid or '—'} → {report.new_pid}, ready in {report.time_to_ready_s:.1f} s",
            *_compare(report.before, report.after),
        ]
        if report.requeued_job:
            lines.append(f"- job {report.requeued_job} went back to the queue (another device may run it)")
        return "\n".join(lines)


def worker_line(worker: WorkerStatus) -> str:
    """State, process, job and counters of one worker, in one line."""
    where = f"{worker.worker.backend} on {worker.worker.device}" if worker.worker else worker.device
    running = f"running {', '.join(worker.in_flight_jobs)}" if worker.in_flight_jobs else "idle"
    cache = worker.profile_cache
    profiles = f" · voice profiles {cache.size}/{cache.capacity}" if cache is not None else ""
    deaths = f" · died while starting {worker.start_deaths}" if worker.start_deaths else ""
    return (
        f"{worker.label} {worker.state} · {where} · pid {worker.pid or '—'} · {running} · "
        f"{worker.completed} done, {worker.failed} failed · restarts {worker.restarts}{deaths}{profiles}"
    )


def device_tabs(engine: Engine) -> tuple[DeviceView, ...]:
    """One tab per worker (nothing with one worker); call inside the panel's column."""
    workers = engine.status().workers
    if len(workers) < 2:
        return ()
    status = engine.status()
    dashboard = f" The cluster's own view: [Ray dashboard]({status.dashboard_url})." if status.dashboard_url else ""
    gr.Markdown(f"#### Devices\nClean cache and Soft restart above act on every device; these act on one.{dashboard}")
    views = []
    with gr.Tabs(elem_id="panel-devices"):
        for worker in workers:
            with gr.Tab(worker.label, id=f"device-{worker.index}"):
                gauges = gr.HTML(elem_id=f"device-{worker.index}-gauges", apply_default_css=False)
                with gr.Row():
                    clean = gr.Button("Clean cache", size="sm", elem_id=f"device-{worker.index}-clean")
                    restart = gr.Button(
                        "Soft restart", size="sm", variant="stop", elem_id=f"device-{worker.index}-restart"
                    )
            views.append(DeviceView(worker.index, gauges, clean, restart))
    return tuple(views)


def wire_device_tabs(demo: gr.Blocks, views: tuple[DeviceView, ...], panel: PanelView, engine: Engine) -> None:
    """Ticks with the panel's fast timer; buttons use the panel's checkboxes and report, one control at a time."""
    if not views:
        return
    handler = DevicePanel(engine)
    quiet: dict[str, Any] = {"show_progress": "hidden", "api_visibility": "private", "concurrency_limit": None}
    gr.on([panel.fast_timer.tick, demo.load], handler.gauges, outputs=[v.gauges for v in views], **quiet)
    control: dict[str, Any] = {"concurrency_id": "control", "concurrency_limit": 1, "api_visibility": "private"}
    for view in views:
        view.clean.click(
            partial(handler.clean_cache, view.index), inputs=panel.clear_profiles, outputs=panel.report, **control
        )
        view.restart.click(
            partial(handler.soft_restart, view.index), inputs=panel.force, outputs=panel.report, **control
        )
