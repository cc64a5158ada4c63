"""'My voices' on the Clone tab: pick a saved voice (it fills the prompt and transcript), save the current
prompt under a name, delete one. Layout and a few short handlers over the same ``VoiceStore`` as the API.

With ``--auth`` each login lists, picks, uses and deletes only the voices it saved (the admins: everyone's); another
login's voice id is answered as missing.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from voicelab.engine.validation import MAX_TRANSCRIPT_CHARS, as_text
from voicelab.errors import InvalidPromptError, StorageError
from voicelab.owners import Login, login_named
from voicelab.ui.edges import login_of, shows_errors, upload_path
from voicelab.ui.i18n import t
from voicelab.voices import VoiceStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VoicePickerView:
    picker: gr.Dropdown
    name: gr.Textbox
    save: gr.Button
    delete: gr.Button
    status: gr.Markdown


def voice_picker_layout() -> VoicePickerView:
    with gr.Accordion(t("my_voices"), open=True), gr.Row(equal_height=True):
        picker = gr.Dropdown(label=t("saved_voice"), choices=[], value=None, scale=3, elem_id="voices-picker")
        name = gr.Textbox(label=t("save_as"), placeholder=t("save_as_placeholder"), scale=2, elem_id="voices-name")
        save = gr.Button(t("save_voice"), scale=1, elem_id="voices-save")
        delete = gr.Button(t("delete"), variant="stop", scale=1, elem_id="voices-delete")
    status = gr.Markdown(elem_id="voices-status")
    return VoicePickerView(picker, name, save, delete, status)


class VoiceLibrary:
    """The picker's handlers; ``cache_dir`` is Gradio's folder, where a picked clip is copied to be served."""

    def __init__(self, store: VoiceStore, cache_dir: Path, admins: frozenset[str] = frozenset()) -> None:
        self.store, self.cache_dir, self.admins = store, cache_dir, admins

    def caller(self, request: gr.Request | None) -> Login:
        return login_named(login_of(request), self.admins)

    def design_choices(self, request: gr.Request | None = None) -> Any:
        """The Design tab's voice list: the built-in voices first, then the caller's saved voices."""
        mine = self.store.list(self.caller(request).viewer)
        return gr.update(choices=[("Built-in voice", ""), *((v.name, v.voice_id) for v in mine)], value="")

    def choices(self, selected: str | None = None, request: gr.Request | None = None) -> Any:
        options = [(v.name, v.voice_id) for v in self.store.list(self.caller(request).viewer)]
        known = {voice_id for _, voice_id in options}
        return gr.update(choices=options, value=selected if selected in known else None)

    def listed(self, request: gr.Request) -> Any:
        """The Clone tab's list when the page loads."""
        return self.choices(None, request)

    @shows_errors
    def pick(self, voice_id: str | None, request: gr.Request | None = None) -> tuple[Any, Any]:
        """The saved clip into the prompt player, its transcript into the transcript box."""
        voice_id = as_text("The saved voice", voice_id, 64).strip()
        if not voice_id:
            return gr.skip(), gr.skip()
        voice = self.store.get(voice_id, self.caller(request).viewer)
        data = voice.clip_path.read_bytes()
        target = self.cache_dir / hashlib.sha256(data).hexdigest() / f"{voice.voice_id}{voice.clip_path.suffix}"
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(voice.clip_path, target)
        except OSError as exc:
            raise StorageError(f"The saved voice could not be opened ({exc.strerror or exc}).") from exc
        return str(target), voice.transcript

    @shows_errors
    def save(
        self, name: str, prompt: str | dict[str, Any] | None, transcript: str, request: gr.Request | None = None
    ) -> tuple[Any, str]:
        prompt_path = upload_path("The voice prompt", prompt)
        if not prompt_path:
            raise InvalidPromptError("Upload or record a voice prompt first, then save it.")
        path = Path(prompt_path)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InvalidPromptError("The voice prompt is no longer on the server; please upload it again.") from exc
        said = as_text("The transcript of the prompt", transcript, MAX_TRANSCRIPT_CHARS)
        owner = login_of(request)
        voice = self.store.save(as_text("The name", name, 200), data, said, path.suffix or ".wav", owner)
        saved = f"Saved **{voice.name}** ({voice.duration_s:.1f} s of speech)."
        return self.choices(voice.voice_id, request), saved

    @shows_errors
    def delete(self, voice_id: str | None, request: gr.Request | None = None) -> tuple[Any, str]:
        voice_id = as_text("The saved voice", voice_id, 64).strip()
        if not voice_id:
            return gr.skip(), "Pick a saved voice to delete."
        voice = self.store.delete(voice_id, self.caller(request).viewer)
        return self.choices(None, request), f"Deleted **{voice.name}**."
