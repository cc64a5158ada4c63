"""One server: the FastAPI app with the API routes, and the Gradio studio mounted at ``/``, run by uvicorn.

Both share one ``GenerationService`` (so one History and one engine queue) and one ``VoiceStore``. The API's
routes come first, so ``/v1/...``, ``/health``, ``/metrics`` and ``/docs`` are never taken by the UI.
``ServerThread`` runs uvicorn on a thread (app.py, the browser tests and the API tests all use it).
"""

from __future__ import annotations

import logging
import threading
import time

import gradio as gr
import uvicorn
from fastapi import FastAPI
from fastapi.params import Depends

from voicelab.api import errors, ops, speech, voices
from voicelab.api.auth import KeyCheck, current_login
from voicelab.api.context import ApiContext
from voicelab.api.memory import AllocatorEvents, Telemetry
from voicelab.api.metrics import Metrics
from voicelab.engine.api import Engine
from voicelab.history import History
from voicelab.settings import Settings
from voicelab.studio import GenerationService
from voicelab.ui.app_ui import build_ui
from voicelab.ui.serving import configure_environment, mount_options
from voicelab.voices import VOICES_DIRNAME, VoiceStore

log = logging.getLogger(__name__)

DESCRIPTION = (
    "VoiceLab's HTTP API. `POST /v1/audio/speech` speaks OpenAI's shape; saved voices live under "
    "`/v1/audio/voices`. With `--auth`, send an API key of a login as `Authorization: Bearer <key>` or "
    "`X-API-Key: <key>` (`python -m voicelab keys add LOGIN` makes one; never the password); a key sees and uses only "
    "its login's History and saved voices (`/health` and these docs stay open). The studio UI is at `/`."
)


def build_api(client: Engine, settings: Settings, telemetry: Telemetry) -> tuple[FastAPI, ApiContext]:
    """The API app alone (no UI): what ``build_app`` mounts the studio into."""
    paths = configure_environment(settings)
    service = GenerationService(client, History(paths.history), settings, telemetry)
    events = AllocatorEvents()
    client.add_stats_listener(events)
    ctx = ApiContext(
        service=service,
        voices=VoiceStore(paths.outputs / VOICES_DIRNAME, settings.max_upload_mb * 2**20),
        telemetry=telemetry,
        events=events,
        metrics=Metrics(client.status, telemetry, events),
    )
    app = FastAPI(title="VoiceLab", version="0.1.0", description=DESCRIPTION)
    errors.install(app)
    app.state.key_check = KeyCheck(settings)
    auth = Depends(current_login)
    app.include_router(ops.open_routes(ctx))
    app.include_router(speech.routes(ctx, auth))
    app.include_router(voices.routes(ctx, auth))
    app.include_router(ops.routes(ctx, auth))
    app.include_router(voices.fallback_routes(auth))  # last: the rest of /v1 in the API's error shape
    return app, ctx


def build_app(client: Engine, settings: Settings, telemetry: Telemetry) -> FastAPI:
    """API routes plus the studio at ``/``, protected by ``--auth`` (login page for the UI, key for the API)."""
    app, ctx = build_api(client, settings, telemetry)
    demo = build_ui(client, settings, telemetry, service=ctx.service, voices=ctx.voices)
    return gr.mount_gradio_app(app, demo, path="/", **mount_options(settings))


class ServerThread:
    """uvicorn serving ``app`` on a daemon thread; ``start`` returns once it listens (or raises why not)."""

    def __init__(self, app: FastAPI, host: str, port: int, quiet: bool = False) -> None:
        config = uvicorn.Config(
            app, host=host, port=port, log_level="warning" if quiet else "info", access_log=False, lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="voicelab-http", daemon=True)

    def start(self, timeout_s: float = 60.0) -> None:
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the HTTP server did not start (is the port already in use?)")
            time.sleep(0.05)

    def wait(self) -> None:
        """Block until the server stops (a signal in the main thread interrupts this)."""
        while self.thread.is_alive():
            self.thread.join(1.0)

    def stop(self, timeout_s: float = 10.0) -> None:
        self.server.should_exit = True
        if self.thread.is_alive():
            self.thread.join(timeout_s)
