"""Drive the studio's (streaming) button handlers to their end, as the browser would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from voicelab.engine.api import Engine
from voicelab.history import History
from voicelab.studio import GenerationRequest, GenerationService, PromptClip, Take
from voicelab.ui.handlers import Studio
from voicelab.voices import VoiceStore


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


def saved_voice_request(store: VoiceStore, voice_id: str, text: str, seed: int = 7) -> GenerationRequest:
    """A clone request in English with a saved voice, as the Clone tab makes it when that voice is picked."""
    saved = store.get(voice_id)
    return GenerationRequest(
        text, kind="clone", language="en", seed=seed, prompt=PromptClip(saved.clip_path, "", saved)
    )


def streamed_lines_and_takes(service: GenerationService, request: GenerationRequest) -> tuple[list[str], list[Take]]:
    """Every status line the streaming Clone handler showed, and the takes it finished, in order."""
    lines, takes = [], []
    for _, _, _, status, shown in Studio(service).run_streaming(request):
        lines.append(status)
        if shown is not None:
            takes.append(shown.take)
    return lines, takes
