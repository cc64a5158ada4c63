"""Backends by name: adding one is a package under ``voicelab/backends/`` plus one line here.

A value is "module:factory" so the spawned worker imports the backend itself (the server process never does);
the factory takes the ``Settings`` and reads what it needs from them (a voice file, a model directory).
Any "module:factory" path works too, which is how tests plug in their own backends.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import cast

from voicelab.backends.base import Backend
from voicelab.errors import BackendLoadError
from voicelab.settings import Settings

BACKENDS: dict[str, str] = {
    "builtin": "voicelab.backends.builtin.backend:create",  # English + Mandarin, routed by script (the default)
    "piper": "voicelab.backends.piper.backend:create",  # a Piper voice alone (English by default)
    "mandarin": "voicelab.backends.mandarin.backend:create",  # the Mandarin voice alone
    "kokoro": "voicelab.backends.kokoro.backend:create",  # Kokoro-82M fitted to each prompt (English) + Mandarin
    "cosyvoice": "voicelab.backends.cosyvoice.backend:create",  # optional install: requirements-cosyvoice.txt
}
# Optional: a torch-free "module:function" saying what is missing to start a backend (see ``preflight``).
PREFLIGHTS: dict[str, str] = {
    "cosyvoice": "voicelab.backends.cosyvoice.preflight:preflight",
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


def create_backend(settings: Settings) -> Backend:
    """Instantiate ``settings.backend`` by registry name or by an explicit "module:factory" path."""
    name = settings.backend
    target = BACKENDS.get(name, name)
    if ":" not in target:
        raise BackendLoadError(f"Unknown backend '{name}'. Available: {', '.join(sorted(BACKENDS))}.")
    module_name, attribute = target.split(":", 1)
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise BackendLoadError(f"Backend '{name}' could not be imported: {exc}.") from exc
    return cast(Callable[[Settings], Backend], factory)(settings)
