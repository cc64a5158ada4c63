"""Backends by name. A value is "module:attribute" so the spawned worker can import it itself."""

from __future__ import annotations

import importlib
from typing import Any

from voicelab.errors import BackendLoadError

BACKENDS: dict[str, str] = {
    "piper": "voicelab.backends.piper.backend:PiperBackend",
}


def create_backend(name: str, voice_path: str = "") -> Any:
    """Instantiate a backend by registry name, or by an explicit "module:Class" path (used by tests)."""
    target = BACKENDS.get(name, name)
    if ":" not in target:
        raise BackendLoadError(f"Unknown backend '{name}'. Available: {', '.join(sorted(BACKENDS))}.")
    module_name, attribute = target.split(":", 1)
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise BackendLoadError(f"Backend '{name}' could not be imported: {exc}.") from exc
    return factory(voice_path or None)
