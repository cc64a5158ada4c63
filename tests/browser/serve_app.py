"""Launch the real studio (engine client + telemetry + build_ui) for the browser tests, like app.py does.

Run as ``python -m tests.browser.serve_app --port N --outputs DIR [--backend NAME]``; prints ``VOICELAB READY``
once the worker is ready and the server listens, then serves until killed.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from voicelab.engine.client import EngineClient
from voicelab.settings import Settings
from voicelab.telemetry.host import HostSampler
from voicelab.telemetry.nvml import NvmlSampler
from voicelab.telemetry.sampler import TelemetrySampler
from voicelab.telemetry.samples import EngineState
from voicelab.ui.app_ui import build_ui
from voicelab.ui.serving import launch_options

TONE_BACKEND = "tests.fixture_backends:ToneBackend"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--outputs", required=True)
    parser.add_argument("--backend", default=TONE_BACKEND)
    parser.add_argument("--queue-size", type=int, default=4)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # so the finally below stops the worker cleanly
    logging.basicConfig(level=os.environ.get("VOICELAB_LOG_LEVEL", "WARNING"))
    settings = Settings(
        backend=args.backend, port=args.port, outputs_dir=args.outputs, queue_size=args.queue_size, max_upload_mb=5
    )
    client = EngineClient(settings)

    def engine_state() -> EngineState:
        status = client.status()
        return EngineState(status.queue_length, status.in_flight_job, status.worker_pid or None)

    telemetry = TelemetrySampler(NvmlSampler(), HostSampler(), engine_state)
    client.add_stats_listener(telemetry.push_allocator)
    telemetry.start()
    demo = build_ui(client, settings, telemetry)  # while the worker loads the model
    demo.launch(prevent_thread_lock=True, quiet=True, **launch_options(settings))
    client.wait_ready(120)
    print("VOICELAB READY", flush=True)
    try:
        demo.block_thread()
    finally:
        telemetry.stop()
        client.close()


if __name__ == "__main__":
    main()
