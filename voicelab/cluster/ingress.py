"""The ingress deployment: the same FastAPI app (OpenAI speech, voices, health, memory, metrics) with the Gradio
studio mounted, built inside a Serve replica around a ``ServeEngine`` instead of the local ``EngineClient``.

Everything above the engine is the one-host code: one ``GenerationService`` validates and keeps History, the
UI's handlers and the API's routes are the same functions. One ingress replica: the studio's queue and its
browser sessions live in one process (the engine replicas are what scales).
"""

from __future__ import annotations

from typing import Any

from ray.serve.handle import DeploymentHandle

from voicelab.api.server import build_app
from voicelab.cluster.board import board_handle
from voicelab.cluster.engine import ServeEngine
from voicelab.settings import Settings
from voicelab.telemetry.host import HostSampler
from voicelab.telemetry.nvml import NvmlSampler
from voicelab.telemetry.sampler import TelemetrySampler
from voicelab.telemetry.samples import EngineState


class StudioIngress:
    """The deployment's class (``deploy`` wraps it with ``serve.ingress`` and ``serve.deployment``)."""

    def __init__(
        self, engines: DeploymentHandle, settings: Settings, app_name: str, slots: int, dashboard_url: str = ""
    ) -> None:
        self.engine = ServeEngine(engines, board_handle(app_name), settings, slots, dashboard_url)

        def engine_state() -> EngineState:
            status = self.engine.status()
            return EngineState(status.queue_length, status.in_flight_job, status.worker_pid or None)

        self.telemetry = TelemetrySampler(NvmlSampler(), HostSampler(), engine_state)
        self.engine.add_stats_listener(self.telemetry.push_allocator)
        self.telemetry.start()
        self.studio_app = build_app(self.engine, settings, self.telemetry)

    def __serve_build_asgi_app__(self) -> Any:
        """Serve's hook for an app built at replica start (after ``__init__``)."""
        return self.studio_app

    def __del__(self) -> None:
        self.telemetry.stop()
        self.engine.close()
