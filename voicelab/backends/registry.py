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
    "piper": "voicelab.backends.piper.backend:create",
    "cosyvoice": "voicelab.backends.cosyvoice.backend:create",
}


def preflight(settings: Settings) -> str | None:
    """What is missing to start ``settings.backend``, as one sentence (None: nothing, or the backend can't tell).

    A backend module may define ``preflight(settings)``; it must answer without loading a model or importing
    optional packages, so front ends can refuse to start before the worker is spawned.
    """
    target = BACKENDS.get(settings.backend, settings.backend)
    if ":" not in target:
        return None
    try:
        module = importlib.import_module(target.split(":", 1)[0])
    except ImportError:
        return None  # create_backend reports it
    check = getattr(module, "preflight", None)
    return cast(Callable[[Settings], str | None], check)(settings) if callable(check) else None


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
