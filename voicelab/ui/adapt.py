"""What the page shows for the loaded backend and the chosen UI language.

The backend's ``Capabilities`` decide the controls: its own options (Piper's noise sliders only where the
backend has them), the live player (only a streaming backend), the text languages it speaks, and which
instruction examples the presets offer (the built-in voices' parser vocabulary, or CosyVoice's free-text
instructions: dialects, speed, volume, emotion). Read once the worker is ready; before that the page keeps
its defaults.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from voicelab.backends.base import Capabilities
from voicelab.errors import VoiceLabError
from voicelab.studio import GenerationService
from voicelab.ui.localized import examples_for, instruction_hint, preset_choices, ui_language
from voicelab.ui.speak_tab import language_choices

log = logging.getLogger(__name__)

PIPER_OPTIONS = ("noise_scale", "noise_w")
BUILTIN_BACKENDS = frozenset({"builtin", "piper", "mandarin"})
READY_WAIT_S = 120.0


@dataclass(frozen=True)
class PageShape:
    """The parts of the page that depend on the backend and the UI language."""

    options: frozenset[str]  # the backend's own option names shown (of PIPER_OPTIONS)
    live: bool  # the live player (a streaming backend)
    languages: list[tuple[str, str]]  # text-language choices
    presets: list[str]
    examples: list[list[str]]
    instruction_hint: str
    builtin_note: bool  # the built-in voices' licence note
    backend_note: str  # one line on what this backend does natively ("" for the built-in voices)
    language: str = "en"  # the UI language this shape is for


def page_shape(caps: Capabilities | None, backend: str, language: str, can_stream: bool) -> PageShape:
    """``caps`` is ``None`` while the worker is not ready: every control stays as laid out."""
    if caps is None:
        return PageShape(
            frozenset(PIPER_OPTIONS), can_stream, language_choices(("en", "zh"), language),
            preset_choices(language, False),
            examples_for(language), instruction_hint(language, False), True, "", ui_language(language),
        )  # fmt: skip
    native = caps.native_instructions
    names = {spec.name for spec in caps.options}
    return PageShape(
        options=frozenset(n for n in PIPER_OPTIONS if n in names),
        live=can_stream and caps.streaming,
        languages=language_choices(caps.languages, language),
        presets=preset_choices(language, native, caps.languages),
        examples=examples_for(language, caps.languages),
        instruction_hint=instruction_hint(language, native),
        builtin_note=backend in BUILTIN_BACKENDS,
        backend_note=backend_note(caps, backend),
        language=ui_language(language),
    )


def backend_note(caps: Capabilities, backend: str) -> str:
    """What the loaded backend renders itself, so the user knows what the controls do."""
    if backend in BUILTIN_BACKENDS:
        return ""
    cloned_in = caps.native_cloning_languages
    native = [
        "clones the prompt itself" + (f" ({', '.join(cloned_in)}; the rest matched)" if cloned_in else "")
        if caps.native_cloning
        else "",
        "reads the instruction itself (the dropdowns are sent to it as words)" if caps.native_instructions else "",
        "streams" if caps.streaming else "",
    ]
    said = ", ".join(n for n in native if n)
    return f"Backend **{backend}** ({', '.join(caps.languages)}): {said or 'no native cloning or instructions'}."


class PageAdapter:
    """The load-time handler: the page's shape for this backend and the browser's (or chosen) language."""

    def __init__(self, service: GenerationService, can_stream: bool) -> None:
        self.service = service
        self.can_stream = can_stream

    def shape(self, language: str | None) -> PageShape:
        if self.service.engine.status().load_error:  # the panel says why; do not ask for another load per page
            return page_shape(None, "", language or "en", self.can_stream)
        try:
            ready = self.service.backend()
        except (VoiceLabError, TimeoutError) as exc:  # the panel already says why; keep the laid-out controls
            log.info("page keeps its default controls: %s", exc)
            return page_shape(None, "", language or "en", self.can_stream)
        return page_shape(ready.capabilities, ready.backend, language or "en", self.can_stream)
