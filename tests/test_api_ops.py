"""Auth, /health, /v1/memory, clean, restart and /metrics on a server with ``--auth`` (the tone test backend),
and a server whose voice cannot load (503 until ready)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.api_server import TONE, LiveServer, decode, live_server
from voicelab.keys import ApiKeys
from voicelab.settings import Settings

METRICS = (
    "voicelab_requests_total",
    "voicelab_request_duration_seconds_bucket",
    "voicelab_time_to_first_audio_seconds_bucket",
    "voicelab_queue_time_seconds_bucket",
    "voicelab_rtf_bucket",
    "voicelab_queue_depth",
    "voicelab_requests_running",
    "voicelab_gpu_memory_allocated_bytes",
    "voicelab_gpu_memory_reserved_bytes",
    "voicelab_allocator_fragmentation_ratio",
    "voicelab_profile_cache_hits_total",
    "voicelab_profile_cache_misses_total",
    "voicelab_worker_restarts_total",
    "voicelab_ooms_total",
)


@pytest.fixture(scope="module")
def key(server: LiveServer) -> dict[str, str]:
    """An API key of the login ``me`` (``python -m voicelab keys add me``; the password is no key)."""
    return {"Authorization": f"Bearer {ApiKeys(server.settings.api_keys_path).add('me').key}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    settings = Settings(backend=TONE, outputs_dir=str(tmp_path_factory.mktemp("ops")), auth="me:s3cret")
    with live_server(settings) as live:
        yield live


def test_health_is_open_and_says_what_runs(server: LiveServer) -> None:
    health = httpx.get(f"{server.url}/health").json()
    assert health["status"] == "ok" and health["backend"] == "tone" and health["device"] == "cpu"
    assert health["dtype"] == "float32" and health["queue_length"] == 0 and health["in_flight"] is None
    assert health["worker_uptime_s"] > 0 and health["restarts"] == 0


def test_the_api_needs_the_key_and_the_ui_its_login(server: LiveServer, key: dict[str, str]) -> None:
    for method, path in (
        ("POST", "/v1/audio/speech"),
        ("GET", "/v1/audio/voices"),
        ("GET", "/v1/memory"),
        ("POST", "/v1/memory/clean"),
        ("POST", "/v1/engine/restart"),
        ("GET", "/metrics"),
    ):
        refused = httpx.request(method, f"{server.url}{path}", json={"input": "Hi."})
        assert refused.status_code == 401, path
        assert refused.json()["error"]["type"] == "authentication_error"
    wrong = httpx.get(f"{server.url}/v1/audio/voices", headers={"X-API-Key": "nope"})
    assert wrong.status_code == 401
    assert httpx.get(f"{server.url}/v1/audio/voices", headers={"X-API-Key": "s3cret"}).status_code == 401  # a password
    own = key["Authorization"].removeprefix("Bearer ")
    assert httpx.get(f"{server.url}/v1/audio/voices", headers={"X-API-Key": own}).status_code == 200
    spoken = httpx.post(
        f"{server.url}/v1/audio/speech", json={"input": "Hi there.", "response_format": "wav"}, headers=key, timeout=30
    )
    audio, rate = decode(spoken.content)
    assert abs(len(audio) / rate - len("Hi there.") * 0.02) < 0.002  # the tone backend: 0.02 s per character
    assert httpx.get(f"{server.url}/config").status_code == 401  # the studio wants its login
    assert httpx.get(f"{server.url}/docs").status_code == 200
    assert "/v1/audio/speech" in httpx.get(f"{server.url}/openapi.json").json()["paths"]


def test_memory_uses_a1111_names_and_clean_reports_before_and_after(server: LiveServer, key: dict[str, str]) -> None:
    memory = httpx.get(f"{server.url}/v1/memory", headers=key).json()
    assert set(memory["ram"]) == {"free", "used", "total"} and memory["ram"]["total"] > memory["ram"]["used"] > 0
    assert set(memory["cuda"]) == {"system", "allocated", "reserved", "inactive", "events"}
    assert memory["cuda"]["events"] == {"retries": 0, "oom": 0} and memory["device"] == "cpu"
    assert memory["gpu_note"] == "no NVIDIA GPU" and memory["fragmentation"] in (0.0, None)  # CPU: nothing cached
    assert memory["process"]["worker_rss"] > 0
    cleaned = httpx.post(f"{server.url}/v1/memory/clean", headers=key, json={"clear_profiles": True}, timeout=30)
    report = cleaned.json()
    assert cleaned.status_code == 200 and set(report) >= {"before", "after", "freed_bytes", "cleared", "duration_s"}
    assert report["after"]["timestamp"] >= report["before"]["timestamp"]


def test_restart_replaces_the_worker_and_metrics_follow(server: LiveServer, key: dict[str, str]) -> None:
    pid = httpx.get(f"{server.url}/health").json()["worker_pid"]
    report = httpx.post(f"{server.url}/v1/engine/restart", headers=key, json={"force": False}, timeout=120).json()
    assert report["old_pid"] == pid and report["new_pid"] != pid and report["forced"] is False
    health = httpx.get(f"{server.url}/health").json()
    assert health["restarts"] == 1 and health["worker_pid"] == report["new_pid"]
    spoken = httpx.post(f"{server.url}/v1/audio/speech", json={"input": "Back again."}, headers=key, timeout=60)
    assert spoken.status_code == 200
    text = httpx.get(f"{server.url}/metrics", headers=key).text
    for name in METRICS:
        assert name in text, name
    assert "voicelab_worker_restarts_total 1.0" in text
    assert 'voicelab_requests_total{outcome="ok"}' in text and "voicelab_queue_depth 0.0" in text


def test_a_voice_that_cannot_load_answers_503(tmp_path_factory: pytest.TempPathFactory) -> None:
    settings = Settings(backend=TONE, outputs_dir=str(tmp_path_factory.mktemp("broken")), voice_path="/no/such.onnx")
    with live_server(settings, wait=False) as live:
        starting = httpx.get(f"{live.url}/health")
        assert starting.status_code == 503 and starting.json()["status"] in ("starting", "failed")
        deadline = time.monotonic() + 60
        while httpx.get(f"{live.url}/health").json()["status"] == "starting" and time.monotonic() < deadline:
            time.sleep(0.2)
        health = httpx.get(f"{live.url}/health")
        assert health.status_code == 503 and health.json()["status"] == "failed"
        assert "does not exist" in health.json()["load_error"]
        refused = httpx.post(f"{live.url}/v1/audio/speech", json={"input": "Hello."})
        assert refused.status_code == 503 and refused.json()["error"]["type"] == "service_unavailable"
        assert "could not be loaded" in refused.json()["error"]["message"]
