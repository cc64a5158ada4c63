"""Backends by name: adding one is a package under ``voicelab/backends/`` plus one line here.

A value is "module:factory" so the spawned worker imports the backend itself (the server process never does);
the factory takes the ``Settings`` and reads what it needs from them (a voice file, a model directory).
Any "module:factory" path works too, which is how tests plug in their own backends.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import cast

from voicelab.backends import choice
from voicelab.backends.base import Backend
from voicelab.errors import BackendLoadError
from voicelab.settings import Settings

log = logging.getLogger(__name__)

# "auto" (the default) is none of these: the worker picks one by its device (``choice.resolve_backend``).
BACKENDS: dict[str, str] = {
    "builtin": "voicelab.backends.builtin.backend:create",  # English + Mandarin, routed by script
    "piper": "voicelab.backends.piper.backend:create",  # a Piper voice alone (English by default)
    "mandarin": "voicelab.backends.mandarin.backend:create",  # the Mandarin voice alone
    "kokoro": "voicelab.backends.kokoro.backend:create",  # Kokoro-82M fitted to each prompt (English) + Mandarin
    "cosyvoice": "voicelab.backends.cosyvoice.backend:create",  # optional install: requirements-cosyvoice.txt
}
# Optional: a torch-free "module:function" saying what is missing to start a backend (see ``preflight``).
PREFLIGHTS: dict[str, str] = {
    "cosyvoice": "voicelab.backends.cosyvoice.preflight:preflight",
    "kokoro": "voicelab.backends.choice:kokoro_preflight",
}


def preflight(settings: Settings) -> str | None:
    """What is missing to start ``settings.backend``, as one sentence (None: nothing known to be missing).

    Front ends call it before spawning the worker; the function it names must answer without loading a model,
    importing torch or importing optional packages.
    """
    target = PREFLIGHTS.get(settings.backend)
    if target is None:
        return None
    module_name, attribute = target.split(":", 1)
    check = getattr(importlib.import_module(module_name), attribute)
    return cast(Callable[[Settings], str | None], check)(settings)


def backend_name(settings: Settings, device: str) -> str:
    """The backend to load on ``device`` (the worker's, resolved): ``settings.backend``, with ``auto`` decided by the
    device and whether Kokoro is installed; the reason is logged (a warning where Kokoro was wanted but is missing)."""
    if settings.backend != choice.AUTO_BACKEND:
        return settings.backend
    problem = choice.kokoro_problem() if device.startswith("cuda") else None
    chosen = choice.resolve_backend(settings.backend, device, problem)
    (log.warning if problem else log.info)("voice engine %s: %s", chosen.name, chosen.reason)
    return chosen.name


def create_backend(settings: Settings, device: str = "cpu") -> Backend:
    """Instantiate ``settings.backend`` (``auto``: by ``device``) by registry name or by a "module:factory" path."""
    name = backend_name(settings, device)
    target = BACKENDS.get(name, name)
    if ":" not in target:
        raise BackendLoadError(f"Unknown backend '{name}'. Available: {', '.join(sorted(BACKENDS))}.")
    module_name, attribute = target.split(":", 1)
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise BackendLoadError(f"Backend '{name}' could not be imported: {exc}.") from exc
    return cast(Callable[[Settings], Backend], factory)(settings)
