"""Which voice engine the studio runs, and switching it: Built-in (Piper + matching) or Kokoro (fitted to the prompt).

A switch is a Soft restart whose new worker loads the other backend (``Engine.soft_restart(backend=...)``): the
job in flight finishes first (with ``force`` it is run again from the start on the new engine), queued jobs stay
queued and are spoken by the engine chosen, and the page reshapes from the new worker's capabilities. The switch is
offered where the studio started with ``--backend auto``, ``builtin`` or ``kokoro`` (another backend stays as it
started) and Kokoro only where its packages are installed; nothing here imports torch or a model.
"""

from __future__ import annotations

from dataclasses import dataclass

from voicelab.backends.choice import KOKORO, SWITCHABLE, VOICE_ENGINES, kokoro_problem
from voicelab.engine.status import RestartReport
from voicelab.errors import EngineChoiceError, InvalidSettingError
from voicelab.studio import GenerationService


@dataclass(frozen=True)
class EngineOption:
    """One engine as the page and the API list it."""

    name: str  # the backend it loads ("builtin", "kokoro")
    label: str
    summary: str
    problem: str | None = None  # why it cannot be chosen here, one sentence (None: it can)


@dataclass(frozen=True)
class EngineChoices:
    """The engine running now and those the studio offers."""

    current: str | None  # the backend of the ready worker (None while none is ready)
    switchable: bool  # False: the studio runs another backend (CosyVoice, a plug-in), kept as it started
    options: tuple[EngineOption, ...]

    def option(self, name: str) -> EngineOption | None:
        return next((option for option in self.options if option.name == name), None)


@dataclass(frozen=True)
class EngineSwitch:
    """What a switch did: the engine before and after, and the Soft restart's report (None: nothing to switch)."""

    before: str | None
    after: str
    report: RestartReport | None


def engine_choices(service: GenerationService) -> EngineChoices:
    """Read without waiting on the worker (the engine's status), for every page load and ``GET /v1/engine``."""
    worker = service.engine.status().worker
    problems = {KOKORO: kokoro_problem()}
    options = tuple(EngineOption(e.name, e.label, e.summary, problems.get(e.name)) for e in VOICE_ENGINES)
    return EngineChoices(worker.backend if worker else None, service.settings.backend in SWITCHABLE, options)


def switch_engine(service: GenerationService, name: str, force: bool = False) -> EngineSwitch:
    """Run the ``name`` engine from now on (waiting for the job in flight unless ``force``); raises one sentence."""
    choices = engine_choices(service)
    if not choices.switchable:
        raise EngineChoiceError(
            f"This studio runs --backend {service.settings.backend}; the voice engine can be switched when it starts "
            "with --backend auto, builtin or kokoro."
        )
    option = choices.option(name)
    if option is None:
        known = " or ".join(o.name for o in choices.options)
        raise InvalidSettingError(f"Unknown voice engine {name!r}; choose {known}.")
    if option.problem is not None:
        raise EngineChoiceError(f"{option.problem} The voice engine stays {choices.current or 'as it is'}.")
    if choices.current == name:
        return EngineSwitch(name, name, None)
    try:
        report = service.engine.soft_restart(force=force, backend=name)
    finally:
        service.forget_backend()  # the next request reads the new worker's capabilities
    return EngineSwitch(choices.current, name, report)
