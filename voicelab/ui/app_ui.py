"""The VoiceLab studio: layout first, then all event wiring in one place.

``build_ui`` needs a running engine client (the UI's only handle on the model, through the generation
service) and, optionally, the telemetry sampler for the resource panel. It imports no torch and loads no
model. Launch it with ``voicelab.ui.serving.launch_options(settings)`` so only the outputs folder is served.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import gradio as gr

from voicelab.engine.api import Engine
from voicelab.history import History
from voicelab.settings import Settings
from voicelab.studio import GenerationService
from voicelab.ui import handlers as actions
from voicelab.ui.clone_tab import CloneView, clone_layout
from voicelab.ui.design_tab import DesignView, design_layout
from voicelab.ui.devices import device_tabs, wire_device_tabs
from voicelab.ui.handlers import Studio
from voicelab.ui.history_tab import HistoryBrowser, HistoryView, history_layout
from voicelab.ui.panel import PanelView, ResourcePanel, panel_layout
from voicelab.ui.serving import configure_environment
from voicelab.ui.speak_tab import SpeakView, can_stream, speak_layout
from voicelab.ui.voices_tab import VoiceLibrary, VoicePickerView, voice_picker_layout
from voicelab.voices import VOICES_DIRNAME, VoiceStore

GENERATE_CONCURRENCY_HEADROOM = 1  # one more than the engine queue, so the engine (not Gradio) says "busy"
QUIET: dict[str, Any] = {"show_progress": "hidden", "api_visibility": "private"}


@dataclass(frozen=True)
class Views:
    speak: SpeakView
    clone: CloneView
    design: DesignView
    history_tab: gr.Tab
    history: HistoryView
    panel: PanelView


@dataclass(frozen=True)
class Handlers:
    studio: Studio
    history: HistoryBrowser
    panel: ResourcePanel


def build_ui(
    client: Engine,
    settings: Settings,
    telemetry: Any | None = None,
    service: GenerationService | None = None,
    voices: VoiceStore | None = None,
) -> gr.Blocks:
    """The Gradio app for ``client``; ``telemetry`` is a ``TelemetrySampler`` (or ``None``: engine figures only).

    ``service`` and ``voices`` are shared with the HTTP API when it is mounted beside the UI.
    """
    paths = configure_environment(settings)
    if service is None:
        service = GenerationService(client, History(paths.history), settings, telemetry)
    history = service.history or History(paths.history)
    history.sweep()
    store = voices or VoiceStore(paths.outputs / VOICES_DIRNAME)
    library = VoiceLibrary(store, paths.gradio_temp)
    handlers = Handlers(
        Studio(service, paths.gradio_temp, can_stream(), store),
        HistoryBrowser(history),
        ResourcePanel(client, telemetry),
    )
    with gr.Blocks(title="VoiceLab", analytics_enabled=False, delete_cache=(3600, 24 * 3600)) as demo:
        gr.Markdown("# VoiceLab\nVoice cloning and instruction-controlled speech that keeps running.")
        if paths.notice:
            gr.HTML(f'<p class="vl-warning">{html.escape(paths.notice)}</p>', elem_id="storage-notice")
        with gr.Row():
            with gr.Column(scale=3), gr.Tabs():
                with gr.Tab("Speak", id="speak"):
                    speak = speak_layout()
                with gr.Tab("Clone", id="clone"):
                    picker = voice_picker_layout()
                    clone = clone_layout()
                with gr.Tab("Design / Instruct", id="design"):
                    design = design_layout()
                with gr.Tab("History", id="history") as history_tab:
                    history_view = history_layout()
            with gr.Column(scale=2, min_width=320):
                panel = panel_layout()
                devices = device_tabs(client)
        _wire(demo, Views(speak, clone, design, history_tab, history_view, panel), handlers, settings)
        wire_device_tabs(demo, devices, panel, client)
        wire_voices(demo, picker, clone, design, library)
    return demo


def _wire(demo: gr.Blocks, views: Views, handlers: Handlers, settings: Settings) -> None:
    """Every event of the app. Named endpoints are the app's API; timers and chained refreshes stay private."""
    _wire_generation(views, handlers, settings)
    _wire_design_helpers(views.design)
    _wire_history(demo, views, handlers)
    _wire_panel(demo, views.panel, handlers.panel)


def _wire_generation(views: Views, handlers: Handlers, settings: Settings) -> None:
    """The three Generate buttons, each refreshing History when it succeeds."""
    limit: dict[str, Any] = {"concurrency_limit": settings.queue_size + GENERATE_CONCURRENCY_HEADROOM}
    limit["concurrency_id"] = "generate"
    speak, clone, design, history = views.speak, views.clone, views.design, views.history
    gr.on(
        [speak.generate.click, speak.text.submit],
        handlers.studio.speak,
        inputs=speak.inputs,
        outputs=[speak.live, speak.subtitles, speak.audio, speak.meta],
        api_name="speak",
        **limit,
    ).success(handlers.history.refresh, outputs=history.listing, **QUIET)
    gr.on(
        [clone.generate.click],
        handlers.studio.clone,
        inputs=clone.inputs,
        outputs=[clone.live, clone.subtitles, clone.audio, clone.meta, clone.figures],
        api_name="clone",
        **limit,
    ).success(handlers.history.refresh, outputs=history.listing, **QUIET)
    gr.on(
        [design.generate.click],
        handlers.studio.design,
        inputs=design.inputs,
        outputs=[*design.takes_audio, design.meta, design.parsed],
        api_name="design",
        **limit,
    ).success(handlers.history.refresh, outputs=history.listing, **QUIET)


def _wire_design_helpers(design: DesignView) -> None:
    design.preset.input(
        actions.apply_preset, inputs=design.preset, outputs=[design.instruction, design.text, *design.controls], **QUIET
    )
    style_changes = [design.instruction.change, *(c.change for c in design.controls)]
    gr.on(style_changes, actions.preview_style, inputs=design.style_inputs, outputs=design.parsed, **QUIET)
    design.takes.change(actions.show_takes, inputs=design.takes, outputs=list(design.takes_audio), **QUIET)


def _wire_history(demo: gr.Blocks, views: Views, handlers: Handlers) -> None:
    history = views.history
    shown = [history.audio, history.files, history.details]
    refreshers = [history.refresh.click, views.history_tab.select, demo.load]
    gr.on(refreshers, handlers.history.refresh, outputs=history.listing, api_name="history_list")
    history.entry.input(handlers.history.show, inputs=history.entry, outputs=shown, api_name="history_show")
    history.table.select(handlers.history.select_row, outputs=history.entry, **QUIET).then(
        handlers.history.show, inputs=history.entry, outputs=shown, **QUIET
    )
    history.delete.click(
        handlers.history.delete, inputs=history.entry, outputs=history.listing, api_name="history_delete"
    )


def _wire_panel(demo: gr.Blocks, panel: PanelView, handler: ResourcePanel) -> None:
    ticks: dict[str, Any] = {"concurrency_limit": None, **QUIET}
    gr.on([panel.fast_timer.tick, demo.load], handler.gauges, outputs=panel.gauges, **ticks)
    gr.on([panel.slow_timer.tick, demo.load], handler.timeline, outputs=panel.timeline, **ticks)
    control: dict[str, Any] = {"concurrency_id": "control", "concurrency_limit": 1}
    panel.clean.click(
        handler.clean_cache, inputs=panel.clear_profiles, outputs=panel.report, api_name="clean_cache", **control
    )
    panel.restart.click(
        handler.soft_restart, inputs=panel.force, outputs=panel.report, api_name="soft_restart", **control
    )
    panel.inspect.click(
        handler.inspect_memory, outputs=[panel.segments, panel.report], api_name="inspect_memory", **control
    )


def wire_voices(
    demo: gr.Blocks, picker: VoicePickerView, clone: CloneView, design: DesignView, library: VoiceLibrary
) -> None:
    """My voices: listed on load (Clone and Design), a pick fills the Clone prompt, save and delete refresh both."""
    demo.load(library.choices, outputs=picker.picker, **QUIET)
    demo.load(library.design_choices, outputs=design.voice, **QUIET)
    picker.picker.change(library.design_choices, outputs=design.voice, **QUIET)
    picker.picker.input(library.pick, inputs=picker.picker, outputs=[clone.prompt, clone.transcript], **QUIET)
    picker.save.click(
        library.save,
        inputs=[picker.name, clone.prompt, clone.transcript],
        outputs=[picker.picker, picker.status],
        api_name="voice_save",
    )
    picker.delete.click(
        library.delete, inputs=picker.picker, outputs=[picker.picker, picker.status], api_name="voice_delete"
    )
