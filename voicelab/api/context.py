"""What every route needs, built once per app (no module-level state)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from voicelab.api.errors import ApiError
from voicelab.api.memory import AllocatorEvents, Telemetry
from voicelab.api.metrics import Metrics
from voicelab.engine.api import Engine
from voicelab.settings import Settings
from voicelab.studio import GenerationService
from voicelab.voices import VoiceStore


@dataclass(frozen=True)
class ApiContext:
    """The service the UI also uses, the engine behind it, saved voices, telemetry and the app's metrics."""

    service: GenerationService
    voices: VoiceStore
    telemetry: Telemetry
    events: AllocatorEvents
    metrics: Metrics
    started_at: float = field(default_factory=time.time)

    @property
    def engine(self) -> Engine:
        return self.service.engine

    @property
    def settings(self) -> Settings:
        return self.service.settings

    def require_ready(self) -> None:
        """503 (with Retry-After) while the worker loads, restarts or failed to load."""
        status = self.engine.status()
        if status.ready:
            return
        if status.load_error:
            raise ApiError(503, f"The voice model could not be loaded: {status.load_error}", "service_unavailable")
        raise ApiError(
            503,
            "The engine is starting or restarting; please try again in a moment.",
            "service_unavailable",
            retry=True,
        )
