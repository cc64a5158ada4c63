"""The History tab: list, filter, play, download, reuse and delete saved generations (it reads the outputs folder).

Every endpoint works by entry id alone (no earlier listing in the same browser session is needed; spaces around it are
dropped). With ``--auth`` each login sees only its own entries; the logins in ``--admins`` see everyone's.
Deleting asks first (in the page; the ``/history_delete`` endpoint deletes at once) and also removes every copy in
Gradio's cache.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import gradio as gr

from voicelab.engine.validation import as_text
from voicelab.errors import StorageError
from voicelab.files import display_path
from voicelab.history import History, HistoryEntry
from voicelab.instruct.controls import style_to_controls
from voicelab.instruct.style import Age, Emotion, Gender, Style
from voicelab.ui.cache import UploadCache
from voicelab.ui.edges import login_of, shows_errors
from voicelab.ui.handlers import CONTROL_NAMES, write_cached

LIST_LIMIT = 200
HEADERS = ["time", "kind", "text", "duration", "backend", "id"]
COLUMN_WIDTHS: list[str | int] = ["16%", "9%", "33%", "12%", "12%", "18%"]
ENUMS = {"emotion": Emotion, "age": Age, "gender": Gender}
SPEAKING_KINDS = ("speak", "api", "cli")


@dataclass(frozen=True)
class HistoryView:
    refresh: gr.Button
    query: gr.Textbox
    count: gr.Markdown
    table: gr.Dataframe
    entry: gr.Dropdown
    audio: gr.Audio
    files: gr.File
    details: gr.Code
    use_prompt: gr.Button
    reuse: gr.Button
    delete: gr.Button
    confirm_row: gr.Row
    confirm_text: gr.Markdown
    confirm: gr.Button
    cancel: gr.Button

    @property
    def listing(self) -> list[gr.components.Component]:
        """Everything a refresh updates."""
        return [self.count, self.table, self.entry, self.audio, self.files, self.details]


def history_layout() -> HistoryView:
    with gr.Row(equal_height=True):
        count = gr.Markdown(elem_id="history-count")
        query = gr.Textbox(
            placeholder="filter: words in the text, instruction, kind or id",
            show_label=False,
            scale=2,
            elem_id="history-filter",
        )
        refresh = gr.Button("Refresh", size="sm", scale=0, elem_id="history-refresh")
    table = gr.Dataframe(
        headers=HEADERS,
        interactive=False,
        wrap=True,
        max_height=320,
        column_widths=COLUMN_WIDTHS,
        elem_id="history-table",
    )
    entry = gr.Dropdown(label="Entry", choices=[], elem_id="history-entry")
    with gr.Row():
        with gr.Column():
            audio = gr.Audio(label="Play", type="filepath", interactive=False, elem_id="history-audio")
            files = gr.File(label="Download (audio + sidecar)", file_count="multiple", interactive=False)
        details = gr.Code(label="Sidecar", language="json", interactive=False, elem_id="history-details")
    with gr.Row():
        use_prompt = gr.Button("Use as prompt", size="sm", elem_id="history-use-prompt")
        reuse = gr.Button("Reuse settings", size="sm", elem_id="history-reuse")
        delete = gr.Button("Delete entry", variant="stop", size="sm", elem_id="history-delete")
    with gr.Row(visible=False, elem_id="history-confirm-row") as confirm_row:
        confirm_text = gr.Markdown(elem_id="history-confirm-text")
        confirm = gr.Button("Yes, delete it", variant="stop", size="sm", elem_id="history-confirm")
        cancel = gr.Button("Cancel", size="sm", elem_id="history-cancel")
    return HistoryView(
        refresh, query, count, table, entry, audio, files, details, use_prompt, reuse, delete, confirm_row,
        confirm_text, confirm, cancel,
    )  # fmt: skip


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _row(entry: HistoryEntry) -> list[str]:
    return [entry.created_text, entry.kind, _short(entry.text, 80), f"{entry.duration_s:.1f} s", entry.backend,
            entry.entry_id]  # fmt: skip


def _label(entry: HistoryEntry) -> str:
    return f"{entry.created_text} · {entry.kind} · {_short(entry.text, 40)}"


def _describe(entry: HistoryEntry) -> str:
    fields = {
        "id": entry.entry_id,
        "created": entry.created_text,
        "kind": entry.kind,
        "text": entry.text,
        "instruction": entry.instruction,
        "style": dict(entry.style),
        "prompt_sha256": entry.prompt_sha256,
        "backend": entry.backend,
        "settings": dict(entry.settings),
        "metrics": dict(entry.metrics),
    }
    return json.dumps(fields, indent=2, ensure_ascii=False)


def matches(entry: HistoryEntry, query: str) -> bool:
    """Every word of the filter appears in the entry's text, instruction, kind or id (case-blind)."""
    haystack = " ".join((entry.text, entry.instruction, entry.kind, entry.entry_id, entry.created_text)).lower()
    return all(word in haystack for word in query.lower().split())


def entry_id_of(value: object) -> str:
    """An entry id as a client sends it: plain text, without the spaces or newline around it."""
    return as_text("The entry id", value, 64).strip()


def style_of(entry: HistoryEntry) -> Style:
    """The sidecar's style back as a ``Style`` (unknown or damaged values are left unspecified)."""
    values: dict[str, Any] = {}
    for name, value in dict(entry.style).items():
        try:
            values[name] = ENUMS[name](value) if name in ENUMS else float(value)
        except (ValueError, TypeError):
            continue
    try:
        return Style(**values)
    except (ValueError, TypeError):
        return Style()


class HistoryBrowser:
    """Handlers of the History tab; every read goes to the folder, so restarts lose nothing."""

    def __init__(
        self, history: History, cache: UploadCache | None = None, admins: frozenset[str] = frozenset()
    ) -> None:
        self.history, self.cache, self.admins = history, cache, admins

    def viewer(self, request: gr.Request | None) -> str | None:
        """Whose entries this caller sees: ``None`` for everyone's (no login, or an admin), else its login."""
        login = login_of(request)
        return None if not login or login in self.admins else login

    @shows_errors
    def refresh(self, query: str | None = None, request: gr.Request | None = None) -> tuple[Any, ...]:
        """The list (only entries matching ``query``), with the newest entry shown."""
        words = as_text("The filter", query, 200)
        entries = [e for e in self.history.entries(owner=self.viewer(request)) if matches(e, words)][:LIST_LIMIT]
        ids = [e.entry_id for e in entries]
        current = ids[0] if ids else None
        noun = "generation" if len(entries) == 1 else "generations"
        where = "matching the filter" if words.strip() else f"in `{display_path(self.history.root)}`"
        count = f"**{len(entries)}** saved {noun} {where}"
        dropdown = gr.Dropdown(choices=[(_label(e), e.entry_id) for e in entries], value=current)
        return (count, [_row(e) for e in entries], dropdown, *self._shown(current, request))

    def _shown(self, entry_id: str | None, request: gr.Request | None) -> tuple[str | None, list[str] | None, str]:
        if not entry_id:
            return None, None, ""
        try:
            entry = self.history.get(entry_id, self.viewer(request))
        except StorageError:
            return None, None, ""
        audio = str(entry.audio_path)
        return audio, [audio, str(entry.audio_path.with_suffix(".json"))], _describe(entry)

    @shows_errors
    def show(self, entry_id: str | None, request: gr.Request | None = None) -> tuple[Any, ...]:
        """One entry by id (a vanished, foreign or refused id gets its sentence)."""
        entry_id = entry_id_of(entry_id)
        if entry_id:
            self.history.get(entry_id, self.viewer(request))
        return self._shown(entry_id, request)

    def select_row(self, event: gr.SelectData) -> str | None:
        """Clicking a table row picks that entry."""
        row = event.row_value or []
        return str(row[-1]) if row else None

    @shows_errors
    def ask_delete(self, entry_id: str | None, request: gr.Request | None = None) -> tuple[Any, Any]:
        """The Delete button only asks: it shows which entry would go, with Yes and Cancel."""
        entry_id = entry_id_of(entry_id)
        if not entry_id:
            raise StorageError("Pick an entry to delete first.")
        entry = self.history.get(entry_id, self.viewer(request))
        return gr.update(visible=True), f"Delete **{_label(entry)}** for good?"

    def cancel_delete(self) -> Any:
        return gr.update(visible=False)

    @shows_errors
    def delete(
        self, entry_id: str | None, query: str | None = None, request: gr.Request | None = None
    ) -> tuple[Any, ...]:
        """Delete an entry and every copy of it in Gradio's cache, then list again (through the filter)."""
        entry_id = entry_id_of(entry_id)
        if not entry_id:
            raise StorageError("Pick an entry to delete first.")
        entry = self.history.get(entry_id, self.viewer(request))
        content = entry.audio_path.read_bytes() if entry.audio_path.is_file() else None
        self.history.delete(entry_id, self.viewer(request))
        if self.cache is not None:
            self.cache.remove_copies((entry_id, entry_id.rsplit("-", 1)[-1]), content)
        return self.refresh(query, request)

    @shows_errors
    def use_as_prompt(self, entry_id: str | None, request: gr.Request | None = None) -> tuple[Any, Any, Any]:
        """The entry's audio into the Clone tab's prompt (its text as the transcript), and that tab shown."""
        entry_id = entry_id_of(entry_id)
        if not entry_id:
            raise StorageError("Pick an entry to use as a prompt first.")
        entry = self.history.get(entry_id, self.viewer(request))
        if self.cache is None:
            return str(entry.audio_path), entry.text, gr.Tabs(selected="clone")
        copy = write_cached(entry.audio_path.read_bytes(), self.cache.root, f"prompt-{entry.entry_id}.wav")
        self.cache.remember_prompt(request.session_hash if request is not None else None, copy)
        return str(copy), entry.text, gr.Tabs(selected="clone")

    @shows_errors
    def reuse_settings(self, entry_id: str | None, request: gr.Request | None = None) -> list[Any]:
        """The entry's text and settings back into the tab that made it (see :func:`reuse_outputs`)."""
        entry_id = entry_id_of(entry_id)
        if not entry_id:
            raise StorageError("Pick an entry to reuse first.")
        entry = self.history.get(entry_id, self.viewer(request))
        return reused(entry)


def reused(entry: HistoryEntry) -> list[Any]:
    """Values for [tabs, 7 Speak inputs, 7 Clone text+controls, Clone instruction + 7 dropdowns, Design text,
    instruction, 7 dropdowns]."""
    settings = dict(entry.settings)
    options = dict(settings.get("options") or {})
    seed = settings.get("seed")
    spoken = [
        entry.text,
        settings.get("speed", 1.0),
        options.get("noise_scale", gr.skip()),
        options.get("noise_w", gr.skip()),
        settings.get("sentence_silence_s", 0.2),
        seed if isinstance(seed, int) else -1,
        settings.get("language") if settings.get("language") in ("en", "zh") else "auto",
    ]
    skip7 = [gr.skip()] * 7
    controls = style_to_controls(style_of(entry))
    styled = [entry.instruction, *(controls[name] for name in CONTROL_NAMES)]
    if entry.kind == "design":
        return [gr.Tabs(selected="design"), *skip7, *skip7, *[gr.skip()] * 8, entry.text, *styled]
    if entry.kind == "clone":  # clone + instruction: the style controls come back too
        return [gr.Tabs(selected="clone"), *skip7, *spoken, *styled, *[gr.skip()] * 9]
    return [gr.Tabs(selected="speak"), *spoken, *skip7, *[gr.skip()] * 8, *[gr.skip()] * 9]


def wire_history(
    demo: gr.Blocks, view: HistoryView, tab: gr.Tab, browser: HistoryBrowser, targets: ReuseTargets
) -> None:
    """The tab's events. Named endpoints take raw values (``preprocess=False``) and work by id alone."""
    quiet: dict[str, Any] = {"show_progress": "hidden", "api_visibility": "private"}
    raw: dict[str, Any] = {"preprocess": False}
    shown = [view.audio, view.files, view.details]
    refreshers = [view.refresh.click, tab.select, demo.load, view.query.submit]
    gr.on(  # always_last: a filter typed while the tab's own refresh runs is applied after it, not dropped
        refreshers,
        browser.refresh,
        inputs=view.query,
        outputs=view.listing,
        api_name="history_list",
        trigger_mode="always_last",
        **raw,
    )
    view.entry.input(browser.show, inputs=view.entry, outputs=shown, api_name="history_show", **raw)
    view.table.select(browser.select_row, outputs=view.entry, **quiet).then(
        browser.show, inputs=view.entry, outputs=shown, **quiet, **raw
    )
    view.delete.click(browser.ask_delete, inputs=view.entry, outputs=[view.confirm_row, view.confirm_text], **quiet)
    view.cancel.click(browser.cancel_delete, outputs=view.confirm_row, **quiet)
    view.confirm.click(browser.cancel_delete, outputs=view.confirm_row, **quiet)
    view.confirm.click(
        browser.delete, inputs=[view.entry, view.query], outputs=view.listing, api_name="history_delete", **raw
    )
    view.use_prompt.click(
        browser.use_as_prompt, inputs=view.entry, outputs=[targets.prompt, targets.transcript, targets.tabs], **quiet
    )
    view.reuse.click(browser.reuse_settings, inputs=view.entry, outputs=targets.reuse_outputs, **quiet)


@dataclass(frozen=True)
class ReuseTargets:
    """The widgets of other tabs that History fills: the Clone prompt, and each tab's text and controls."""

    tabs: gr.Tabs
    prompt: gr.Audio
    transcript: gr.Textbox
    speak: tuple[gr.components.Component, ...]  # the Speak tab's 7 inputs
    clone: tuple[gr.components.Component, ...]  # the Clone tab's text + 6 controls
    design: tuple[gr.components.Component, ...]  # the Design tab's text, instruction and 7 dropdowns

    @property
    def reuse_outputs(self) -> list[Any]:
        return [self.tabs, *self.speak, *self.clone, *self.design]
