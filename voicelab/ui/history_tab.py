"""The History tab: list, play, download and delete saved generations (it reads the outputs folder)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import gradio as gr

from voicelab.errors import StorageError
from voicelab.files import display_path
from voicelab.history import History, HistoryEntry
from voicelab.ui.handlers import shows_errors

LIST_LIMIT = 200
HEADERS = ["time", "kind", "text", "duration", "backend", "id"]


@dataclass(frozen=True)
class HistoryView:
    refresh: gr.Button
    count: gr.Markdown
    table: gr.Dataframe
    entry: gr.Dropdown
    audio: gr.Audio
    files: gr.File
    details: gr.Code
    delete: gr.Button

    @property
    def listing(self) -> list[gr.components.Component]:
        """Everything a refresh updates."""
        return [self.count, self.table, self.entry, self.audio, self.files, self.details]


def history_layout() -> HistoryView:
    with gr.Row():
        count = gr.Markdown(elem_id="history-count")
        refresh = gr.Button("Refresh", size="sm", scale=0, elem_id="history-refresh")
    table = gr.Dataframe(headers=HEADERS, interactive=False, wrap=True, max_height=320, elem_id="history-table")
    entry = gr.Dropdown(label="Entry", choices=[], elem_id="history-entry")
    with gr.Row():
        with gr.Column():
            audio = gr.Audio(label="Play", type="filepath", interactive=False, elem_id="history-audio")
            files = gr.File(label="Download (audio + sidecar)", file_count="multiple", interactive=False)
        details = gr.Code(label="Sidecar", language="json", interactive=False, elem_id="history-details")
    delete = gr.Button("Delete entry", variant="stop", size="sm", elem_id="history-delete")
    return HistoryView(refresh, count, table, entry, audio, files, details, delete)


def _row(entry: HistoryEntry) -> list[str]:
    text = entry.text if len(entry.text) <= 80 else entry.text[:79] + "…"
    return [entry.created_text, entry.kind, text, f"{entry.duration_s:.1f} s", entry.backend, entry.entry_id]


def _label(entry: HistoryEntry) -> str:
    text = entry.text if len(entry.text) <= 40 else entry.text[:39] + "…"
    return f"{entry.created_text} · {entry.kind} · {text}"


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


class HistoryBrowser:
    """Handlers of the History tab; every read goes to the folder, so restarts lose nothing."""

    def __init__(self, history: History) -> None:
        self.history = history

    def refresh(self, selected: str | None = None) -> tuple[Any, ...]:
        """The list, with ``selected`` (or else the newest entry) shown."""
        entries = self.history.entries(limit=LIST_LIMIT)
        ids = [e.entry_id for e in entries]
        current = selected if selected in ids else (ids[0] if ids else None)
        noun = "generation" if len(entries) == 1 else "generations"
        count = f"**{len(entries)}** saved {noun} in `{display_path(self.history.root)}`"
        dropdown = gr.Dropdown(choices=[(_label(e), e.entry_id) for e in entries], value=current)
        return (count, [_row(e) for e in entries], dropdown, *self._shown(current))

    def _shown(self, entry_id: str | None) -> tuple[str | None, list[str] | None, str]:
        if not entry_id:
            return None, None, ""
        try:
            entry = self.history.get(entry_id)
        except StorageError:
            return None, None, ""
        audio = str(entry.audio_path)
        return audio, [audio, str(entry.audio_path.with_suffix(".json"))], _describe(entry)

    @shows_errors
    def show(self, entry_id: str | None) -> tuple[str | None, list[str] | None, str]:
        if entry_id:
            self.history.get(entry_id)  # a vanished or refused id gets its sentence
        return self._shown(entry_id)

    def select_row(self, event: gr.SelectData) -> str | None:
        """Clicking a table row picks that entry."""
        row = event.row_value or []
        return str(row[-1]) if row else None

    @shows_errors
    def delete(self, entry_id: str | None) -> tuple[Any, ...]:
        if not entry_id:
            raise StorageError("Pick an entry to delete first.")
        self.history.delete(entry_id)
        return self.refresh()
