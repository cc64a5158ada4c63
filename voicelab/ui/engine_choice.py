"""The page's voice engine choice: Built-in (Piper + matching) or Kokoro (neural, fitted to the prompt).

Choosing one is a Soft restart whose new worker loads that engine (``voicelab.studio_engine``); the line below the
choice says what it waits for, then what it did, and the page then reshapes from the new engine's capabilities
(``app_ui.wire_page``'s reshape, chained after it). Hidden where the studio runs another backend; shown but not
choosable, with the reason, where Kokoro is not installed. Lines the server writes stay in English.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

import gradio as gr

from voicelab.backends.choice import KOKORO, VOICE_ENGINES
from voicelab.engine.status import QueueView
from voicelab.engine.validation import as_bool
from voicelab.errors import VoiceLabError
from voicelab.studio import GenerationService
from voicelab.studio_engine import EngineSwitch, engine_choices, switch_engine
from voicelab.ui.i18n import t
from voicelab.ui.progress import first_words

POLL_S = 1.0
LABELS = {engine.name: engine.label for engine in VOICE_ENGINES}


@dataclass(frozen=True)
class EngineChoiceView:
    choice: gr.Radio
    report: gr.Markdown


def engine_choice_layout() -> EngineChoiceView:
    """The choice (its value set on load from the running engine) and the line that reports a switch."""
    choice = gr.Radio(
        [(engine.label, engine.name) for engine in VOICE_ENGINES],
        value=None,
        label=t("voice_engine"),
        info=t("voice_engine_info"),
        elem_id="voice-engine",
    )
    return EngineChoiceView(choice, gr.Markdown(elem_id="voice-engine-report"))


class EngineChooser:
    """Handlers of the choice: what it shows on load, and the switch."""

    def __init__(self, service: GenerationService) -> None:
        self.service = service

    def shown(self) -> dict[str, Any]:
        """The running engine selected; hidden where it cannot be switched; not choosable where Kokoro is missing."""
        choices = engine_choices(self.service)
        kokoro = choices.option(KOKORO)
        problem = kokoro.problem if kokoro is not None else None
        current = choices.current if choices.current in LABELS else None
        if problem is not None:
            return gr.update(value=current, visible=choices.switchable, interactive=False, info=problem)
        return gr.update(value=current, visible=choices.switchable, interactive=True)

    def switch(self, name: object, force: object) -> Iterator[str]:
        """What the switch waits for, every second, then what it did; a refusal as its one sentence."""
        try:
            forced = as_bool("Force", force)
            yield from self._switch(str(name or ""), forced)
        except VoiceLabError as exc:
            yield f"**Voice engine**: {exc}"

    def _switch(self, name: str, forced: bool) -> Iterator[str]:
        started = time.monotonic()
        with ThreadPoolExecutor(1, thread_name_prefix="voicelab-engine-choice") as pool:
            future = pool.submit(switch_engine, self.service, name, forced)
            while True:
                try:
                    done = future.result(timeout=POLL_S)
                    break
                except FutureTimeout:
                    view = self.service.engine.queue_view()
                    yield switch_waiting_line(LABELS.get(name, name), view, forced, time.monotonic() - started)
        yield switched_line(done)


def switch_waiting_line(label: str, view: QueueView, forced: bool, waited_s: float) -> str:
    """While a switch is pending: the job it waits for, by its first words, or the new worker starting."""
    if view.in_flight_text and not forced:
        return (
            f"**Voice engine** → {label}: waiting for the job in flight, {first_words(view.in_flight_text)}, to "
            f"finish: {waited_s:.0f} s so far (queued jobs wait and are spoken by {label})."
        )
    return f"**Voice engine** → {label}: starting a new worker… {waited_s:.0f} s so far."


def switched_line(switch: EngineSwitch) -> str:
    label = LABELS.get(switch.after, switch.after)
    report = switch.report
    if report is None:
        return f"**Voice engine**: {label} is running already."
    again = f"; job {report.requeued_job}, which was in flight, runs again on it" if report.requeued_job else ""
    return (
        f"**Voice engine**: {label} now runs: worker {report.old_pid or '—'} → {report.new_pid or '—'}, "
        f"ready in {report.time_to_ready_s:.1f} s{again}."
    )


def wire_engine_choice(
    demo: gr.Blocks, view: EngineChoiceView, chooser: EngineChooser, force: gr.Checkbox, reshape: Callable[[Any], Any]
) -> None:
    """On load: the running engine. A choice switches (one control at a time, as the panel's buttons), then shows
    the engine that runs (the one before, where the switch was refused) and ``reshape`` redoes the page."""
    quiet: dict[str, Any] = {"show_progress": "hidden", "api_visibility": "private"}
    demo.load(chooser.shown, outputs=view.choice, concurrency_limit=None, **quiet)
    control: dict[str, Any] = {"concurrency_id": "control", "concurrency_limit": 1, "preprocess": False}
    switched = view.choice.input(chooser.switch, inputs=[view.choice, force], outputs=view.report, **control, **quiet)
    reshape(switched.then(chooser.shown, outputs=view.choice, **quiet))
