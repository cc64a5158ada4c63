"""The VoiceLab studio: layout first, then all event wiring in one place.

``build_ui`` needs a running engine client (the UI's only handle on the model, through the generation
service) and, optionally, the telemetry sampler for the resource panel. It imports no torch and loads no
model. Launch it with ``voicelab.ui.serving.launch_options(settings)`` so only the outputs folder is served.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import gradio as gr

from voicelab.engine.api import Engine
from voicelab.history import History
from voicelab.owners import admins_of
from voicelab.settings import Settings
from voicelab.studio import GenerationService
from voicelab.ui import handlers as actions
from voicelab.ui.adapt import PIPER_OPTIONS, PageAdapter
from voicelab.ui.cache import UploadCache
from voicelab.ui.clone_tab import CloneView, clone_layout
from voicelab.ui.design_tab import DesignView, design_layout
from voicelab.ui.devices import device_tabs, wire_device_tabs
from voicelab.ui.edges import GuardedBlocks, api_answer
from voicelab.ui.engine_choice import EngineChooser, engine_choice_layout, wire_engine_choice
from voicelab.ui.handlers import CONTROL_NAMES, Studio
from voicelab.ui.history_tab import HistoryBrowser, HistoryView, ReuseTargets, history_layout, wire_history
from voicelab.ui.i18n import DETECT_LANGUAGE_JS, I18N, SET_LANGUAGE_JS, t, text_in
from voicelab.ui.localized import UI_LANGUAGES, choice_labels, ui_language
from voicelab.ui.owned import OwnedFiles
from voicelab.ui.panel import PanelView, ResourcePanel, panel_layout
from voicelab.ui.served import FileAdmission, ServedNames
from voicelab.ui.serving import cache_cleanup, configure_environment, parse_auth
from voicelab.ui.speak_tab import SpeakView, can_stream, speak_layout
from voicelab.ui.style_controls import CONTROL_CHOICES
from voicelab.ui.voices_tab import VoiceLibrary, VoicePickerView, voice_picker_layout
from voicelab.voices import VOICES_DIRNAME, VoiceStore

GENERATE_CONCURRENCY_HEADROOM = 1  # one more than the engine queue, so the engine (not Gradio) says "busy"
TAB_KEYS = ("tab_speak", "tab_clone", "tab_design", "tab_history")
QUIET: dict[str, Any] = {"show_progress": "hidden", "api_visibility": "private"}
# History's tab is rendered once opened; before that, opening it refreshes the list anyway.
PRESS_HISTORY_REFRESH = "() => { document.querySelector('#history-refresh')?.click(); }"


@dataclass(frozen=True)
class Views:
    speak: SpeakView
    clone: CloneView
    design: DesignView
    history_tab: gr.Tab
    history: HistoryView
    panel: PanelView
    tabs: gr.Tabs


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
    admins = admins_of(settings)
    library = VoiceLibrary(store, paths.gradio_temp, admins)
    cache = upload_cache(settings, paths.gradio_temp)
    handlers = Handlers(
        Studio(service, paths.gradio_temp, can_stream(), store, cache, admins),
        HistoryBrowser(history, cache, admins),
        ResourcePanel(client, telemetry),
    )
    with GuardedBlocks(title="VoiceLab", analytics_enabled=False, delete_cache=cache_cleanup(settings)) as demo:
        demo.i18n_instance = I18N  # what launch(i18n=...) and mount_gradio_app(i18n=...) set
        owned = OwnedFiles(enabled=parse_auth(settings.auth) is not None)
        demo.intake = FileAdmission(ServedNames(paths.outputs), history, store, admins, owned)
        with gr.Row(equal_height=True):
            gr.Markdown(t("header"), elem_id="header")
            page = PageView(
                gr.Radio(list(UI_LANGUAGES), value="en", label=t("ui_language"), elem_id="ui-language", scale=0),
                gr.Markdown(elem_id="backend-note"),
            )
        if paths.notice:
            gr.HTML(f'<p class="vl-warning">{html.escape(paths.notice)}</p>', elem_id="storage-notice")
        with gr.Row():
            with gr.Column(scale=3), gr.Tabs() as tabs:
                with gr.Tab(t("tab_speak"), id="speak") as speak_tab:
                    speak = speak_layout()
                with gr.Tab(t("tab_clone"), id="clone") as clone_tab:
                    picker = voice_picker_layout()
                    clone = clone_layout()
                with gr.Tab(t("tab_design"), id="design") as design_tab:
                    design = design_layout()
                with gr.Tab(t("tab_history"), id="history") as history_tab:
                    history_view = history_layout()
            with gr.Column(scale=2, min_width=320):
                engine = engine_choice_layout()
                panel = panel_layout()
                devices = device_tabs(client)
        views = Views(speak, clone, design, history_tab, history_view, panel, tabs)
        _wire(demo, views, handlers, settings)
        wire_device_tabs(demo, devices, panel, client)
        tab_items = (speak_tab, clone_tab, design_tab, history_tab)
        then_reshape = wire_page(demo, replace(page, tabs=tab_items), views, PageAdapter(service, can_stream()))
        wire_engine_choice(demo, engine, EngineChooser(service), panel.force, then_reshape)
        wire_voices(demo, picker, clone, design, library)
    return demo


def upload_cache(settings: Settings, folder: Path) -> UploadCache:
    """Gradio's upload folder within its bounds, pruned once now."""
    cache = UploadCache(folder, settings.upload_cache_max_age_min * 60, int(settings.upload_cache_max_mb * 2**20))
    cache.prune()
    return cache


def _wire(demo: gr.Blocks, views: Views, handlers: Handlers, settings: Settings) -> None:
    """Every event of the app. Named endpoints are the app's API; timers and chained refreshes stay private."""
    _wire_generation(views, handlers, settings)
    _wire_style_helpers(views)
    _wire_history(demo, views, handlers)
    _wire_panel(demo, views.panel, handlers.panel)


def _wire_generation(views: Views, handlers: Handlers, settings: Settings) -> None:
    """The three Generate buttons, each pressing History's Refresh when it succeeds: one always-last event for every
    refresh, so the list shown is read with the filter as it is when the last refresh starts (a separate refresh
    event read the filter when the generation ended and could land after a filtered one, showing every entry).
    Speak and Clone stream to the page's live player; API clients call ``/speak``, ``/clone`` and ``/design``
    (``_wire_api``)."""
    limit: dict[str, Any] = {"concurrency_limit": settings.queue_size + GENERATE_CONCURRENCY_HEADROOM}
    limit["concurrency_id"] = "generate"
    speak, clone, design = views.speak, views.clone, views.design
    page: dict[str, Any] = {"preprocess": False, "api_visibility": "private", **limit}
    gr.on(
        [speak.generate.click, speak.text.submit],
        handlers.studio.speak,
        inputs=speak.inputs,
        outputs=[speak.live, speak.subtitles, speak.audio, speak.meta],
        api_name="speak_live",
        **page,
    ).success(None, js=PRESS_HISTORY_REFRESH)
    gr.on(
        [clone.generate.click],
        handlers.studio.clone,
        inputs=clone.inputs,
        outputs=[clone.live, clone.subtitles, clone.audio, clone.meta, clone.figures],
        api_name="clone_live",
        **page,
    ).success(None, js=PRESS_HISTORY_REFRESH)
    gr.on(
        [design.generate.click],
        handlers.studio.design,
        inputs=design.inputs,
        outputs=[*design.takes_audio, design.meta, design.style.parsed],
        api_name="design_takes",
        **page,
    ).success(None, js=PRESS_HISTORY_REFRESH)
    _wire_api(views, handlers, limit)


def _wire_api(views: Views, handlers: Handlers, limit: dict[str, Any]) -> None:
    """``/speak``, ``/clone`` and ``/design`` for API clients: no trigger on the page, one answer once the takes are
    saved, plain values (the audio file, its subtitles, the status line; Clone's figures; Design's takes, unused ones
    null, its status and style lines), the same parameters and queue as the buttons."""
    speak, clone, design = views.speak, views.clone, views.design
    endpoints = (
        ("speak", handlers.studio.speak, speak.inputs, [speak.audio, speak.subtitles, speak.meta], (2, 1, 3)),
        ("clone", handlers.studio.clone, clone.inputs, [clone.audio, clone.subtitles, clone.meta, clone.figures],
         (2, 1, 3, 4)),
        ("design", handlers.studio.design, design.inputs, [*design.takes_audio, design.meta, design.style.parsed],
         tuple(range(len(design.takes_audio) + 2))),
    )  # fmt: skip
    for name, handler, inputs, outputs, keep in endpoints:
        gr.on([], api_answer(handler, keep), inputs=inputs, outputs=outputs, api_name=name, preprocess=False, **limit)


def _wire_style_helpers(views: Views) -> None:
    """Presets and the live style preview, the same on Clone and Design; the number of Design's players."""
    for style, text in ((views.clone.style, views.clone.text), (views.design.style, views.design.text)):
        outputs = [style.instruction, text, *style.controls]
        style.preset.input(actions.apply_preset, inputs=style.preset, outputs=outputs, **QUIET)
        changes = [style.instruction.change, *(c.change for c in style.controls)]
        gr.on(changes, actions.preview_style, inputs=style.inputs, outputs=style.parsed, **QUIET)
    design = views.design
    design.takes.change(actions.show_takes, inputs=design.takes, outputs=list(design.takes_audio), **QUIET)
    views.speak.examples.click(lambda sample: sample[0], inputs=views.speak.examples, outputs=views.speak.text, **QUIET)


def _wire_history(demo: gr.Blocks, views: Views, handlers: Handlers) -> None:
    speak, clone, design = views.speak, views.clone, views.design
    targets = ReuseTargets(
        views.tabs,
        clone.prompt,
        clone.transcript,
        tuple(speak.inputs),
        tuple(clone.inputs[2:]),
        (design.text, design.style.instruction, *design.style.controls),
    )
    wire_history(demo, views.history, views.history_tab, handlers.history, targets)
    demo.unload(handlers.studio.end_session)


def _wire_panel(demo: gr.Blocks, panel: PanelView, handler: ResourcePanel) -> None:
    ticks: dict[str, Any] = {"concurrency_limit": None, **QUIET}
    gr.on([panel.fast_timer.tick, demo.load], handler.gauges, outputs=panel.gauges, **ticks)
    gr.on([panel.slow_timer.tick, demo.load], handler.timeline, outputs=panel.timeline, **ticks)
    control: dict[str, Any] = {"concurrency_id": "control", "concurrency_limit": 1, "preprocess": False}
    panel.clean.click(
        handler.clean_cache, inputs=panel.clear_profiles, outputs=panel.report, api_name="clean_cache", **control
    )
    panel.restart.click(
        handler.soft_restart, inputs=panel.force, outputs=panel.report, api_name="soft_restart", **control
    )
    panel.inspect.click(
        handler.inspect_memory, outputs=[panel.segments, panel.report], api_name="inspect_memory", **control
    )


@dataclass(frozen=True)
class PageView:
    language: gr.Radio  # the UI language switch ("en" / "zh")
    backend_note: gr.Markdown
    tabs: tuple[gr.Tab, ...] = ()  # Speak, Clone, Design, History: Gradio translates a tab's label only when shown


def wire_page(demo: gr.Blocks, page: PageView, views: Views, adapter: PageAdapter) -> Callable[[Any], Any]:
    """On load: the browser's (or saved) language and the backend's controls; the switch redoes both. Returns
    what chains the same reshape after another event (a switch of the voice engine)."""
    speak, clone, design = views.speak, views.clone, views.design
    outputs = [
        page.language, page.backend_note, speak.noise_scale, speak.noise_w, clone.noise_scale, clone.noise_w,
        speak.live, clone.live, speak.language, clone.language, clone.style.preset, design.style.preset,
        clone.style.instruction, design.style.instruction, speak.examples, speak.note, *page.tabs,
        *clone.style.controls, *design.style.controls,
    ]  # fmt: skip

    def reshape(language: str | None) -> tuple[Any, ...]:
        shape = adapter.shape(ui_language(language))
        noise = [gr.update(visible=name in shape.options) for name in PIPER_OPTIONS]
        hint = gr.update(placeholder=shape.instruction_hint)
        dropdowns = [gr.update(choices=choice_labels(CONTROL_CHOICES[n], shape.language)) for n in CONTROL_NAMES]
        return (
            ui_language(language), shape.backend_note, *noise, *noise,
            gr.update(visible=shape.live), gr.update(visible=shape.live),
            gr.update(choices=shape.languages), gr.update(choices=shape.languages),
            gr.update(choices=shape.presets), gr.update(choices=shape.presets), hint, hint,
            gr.update(samples=shape.examples), gr.update(visible=shape.builtin_note),
            *(gr.update(label=text_in(key, language or "en")) for key in TAB_KEYS[: len(page.tabs)]),
            *dropdowns, *dropdowns,
        )  # fmt: skip

    quiet: dict[str, Any] = {**QUIET, "concurrency_limit": None}
    demo.load(reshape, inputs=page.language, outputs=outputs, js=DETECT_LANGUAGE_JS, **quiet)
    page.language.input(reshape, inputs=page.language, outputs=outputs, js=SET_LANGUAGE_JS, **quiet)
    return lambda event: event.then(reshape, inputs=page.language, outputs=outputs, **quiet)


def wire_voices(
    demo: gr.Blocks, picker: VoicePickerView, clone: CloneView, design: DesignView, library: VoiceLibrary
) -> None:
    """My voices: listed on load (Clone and Design), a pick fills the Clone prompt, save and delete refresh both."""
    demo.load(library.listed, outputs=picker.picker, **QUIET)
    demo.load(library.design_choices, outputs=design.voice, **QUIET)
    picker.picker.change(library.design_choices, outputs=design.voice, **QUIET)
    picker.picker.input(library.pick, inputs=picker.picker, outputs=[clone.prompt, clone.transcript], **QUIET)
    picker.save.click(
        library.save,
        inputs=[picker.name, clone.prompt, clone.transcript],
        outputs=[picker.picker, picker.status],
        api_name="voice_save",
        preprocess=False,
    )
    picker.delete.click(
        library.delete,
        inputs=picker.picker,
        outputs=[picker.picker, picker.status],
        api_name="voice_delete",
        preprocess=False,
    )
