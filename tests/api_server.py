"""A real VoiceLab server for the API tests: worker process, telemetry, the FastAPI app with the studio mounted,
uvicorn on a thread on 127.0.0.1 (``ServerThread``, as app.py runs it)."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
import soundfile as sf

from voicelab.api.server import ServerThread, build_app
from voicelab.bench.studio import free_port
from voicelab.engine.client import EngineClient
from voicelab.settings import Settings
from voicelab.telemetry.host import HostSampler
from voicelab.telemetry.nvml import NvmlSampler
from voicelab.telemetry.sampler import TelemetrySampler
from voicelab.telemetry.samples import EngineState

TONE = "tests.fixture_backends:ToneBackend"
NATIVE = "tests.fixture_native_backend:create"


@dataclass(frozen=True)
class LiveServer:
    url: str
    client: EngineClient
    settings: Settings


@contextlib.contextmanager
def live_server(settings: Settings, wait: bool = True) -> Iterator[LiveServer]:
    settings = replace(settings, host="127.0.0.1", port=free_port())
    client = EngineClient(settings)

    def engine_state() -> EngineState:  # as app.py samples it
        status = client.status()
        return EngineState(status.queue_length, status.in_flight_job, status.worker_pid or None)

    telemetry = TelemetrySampler(NvmlSampler(), HostSampler(), engine_state, interval=0.5)
    client.add_stats_listener(telemetry.push_allocator)
    telemetry.start()
    server = ServerThread(build_app(client, settings, telemetry), settings.host, settings.port, quiet=True)
    try:
        server.start()
        if wait:
            client.wait_ready(60)
        yield LiveServer(f"http://127.0.0.1:{settings.port}", client, settings)
    finally:
        server.stop()
        telemetry.stop()
        client.close()


def voice_clip(seconds: float = 3.0, hz: float = 180.0, rate: int = 16000) -> bytes:
    """A WAV intake accepts as speech: a voiced tone with syllable-like loudness changes."""
    t = np.arange(int(seconds * rate)) / rate
    envelope = 0.5 + 0.5 * np.abs(np.sin(2 * np.pi * 3 * t))
    wave = 0.3 * envelope * (np.sin(2 * np.pi * hz * t) + 0.3 * np.sin(2 * np.pi * 2 * hz * t))
    buffer = io.BytesIO()
    sf.write(buffer, wave.astype(np.float32), rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def decode(data: bytes) -> tuple[np.ndarray, int]:
    audio, rate = sf.read(io.BytesIO(data), dtype="float32")
    return audio, int(rate)
