"""Drive the studio's (streaming) button handlers to their end, as the browser would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from voicelab.engine.api import Engine
from voicelab.history import History
from voicelab.studio import GenerationService
from voicelab.ui.handlers import Studio


def make_studio(engine: Engine, history: History, cache_dir: Path | None = None) -> Studio:
    return Studio(GenerationService(engine, history, engine.settings), cache_dir=cache_dir, streaming=False)


def speak(studio: Studio, *controls: Any) -> tuple[Any, str]:
    """(the saved audio, the final status line) of the Speak button."""
    *_, (_live, _srt, saved, status) = list(studio.speak(*controls))
    return saved, status


def clone(studio: Studio, *controls: Any) -> tuple[Any, str, str]:
    """(the saved audio, the final status line, the clone figures) of the Clone button."""
    *_, (_live, _srt, saved, status, figures) = list(studio.clone(*controls))
    return saved, status, figures
