"""VoiceLab on Ray Serve, on a local Ray cluster in this process: two engine replicas of the streaming native test
backend behind the ingress (the FastAPI app with the studio mounted) on Serve's HTTP proxy, driven with the
official ``openai`` client and raw HTTP as users drive the one-host server. One cluster for the module.

What a user notices: the API answers as on one host; a saved voice's requests go back to the replica that holds
its profile (one profile build per voice); a replica killed mid-request costs that request one clear 503 and
nothing else (queued requests are sent again, History keeps each finished request once); a full queue is a 429;
History and saved voices survive the ingress replica being killed.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import ray
from ray import serve

from tests.api_server import NATIVE, decode, voice_clip
from voicelab.bench.studio import free_port
from voicelab.cluster.board import ReplicaReport, board_handle
from voicelab.cluster.deploy import ClusterOptions, connect, deploy, parse_args, undeploy
from voicelab.cluster.engine import ReplicaSlots, ServeEngine, missing_worker
from voicelab.engine.status import EngineStatus, JobCounters, QueueView, engine_status
from voicelab.errors import InvalidSettingError, WorkerCrashedError
from voicelab.settings import Settings
from voicelab.ui.devices import DevicePanel

TEXT = "Hello there. How are you?"  # 1.4 s of audio (tests/test_api_speech.py)
HOLD = "Hold on."  # spoken once the gate file exists (tests/fixture_native_backend.py)
APP = "voicelab-test"
# Run alone, after the parallel rest: the kill test waits for a job held on each replica, which a loaded 2-core
# machine (the Kokoro and listening tests beside it) delays past its bound. The module fixture starts a cluster:
# two engine workers, Serve, the studio.
pytestmark = [pytest.mark.timeout(600), pytest.mark.serial]


@dataclass(frozen=True)
class RayStudio:
    url: str
    outputs: Path
    gate: Path


def reports() -> list[ReplicaReport]:
    return list(ray.get(board_handle(APP).reports.remote()))


def wait_for(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"no {what} after {timeout_s:.0f} s"
        time.sleep(0.2)


def healthy(url: str, replicas: int) -> bool:
    try:
        health = httpx.get(f"{url}/health", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return False
    return sum(w["state"] == "ready" for w in health.get("workers", [])) == replicas


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayStudio]:
    outputs = tmp_path_factory.mktemp("ray-outputs")
    gate = tmp_path_factory.mktemp("ray-gate") / "open"
    settings = Settings(
        backend=NATIVE, outputs_dir=str(outputs), backend_options=f"chunk_delay_s=0.05,gate_file={gate}",
        queue_size=2, host="127.0.0.1", port=free_port(), torch_threads=1, job_timeout_s=120.0,
    )  # fmt: skip
    options = ClusterOptions(
        replicas=2, cpus_per_replica=0.5, app_name=APP, dashboard=False, local_cpus=4, replica_logs=False
    )
    connect(options)
    try:
        deploy(settings, options)
        url = f"http://127.0.0.1:{settings.port}"
        wait_for(lambda: healthy(url, 2), 300, "two ready replicas")
        yield RayStudio(url, outputs, gate)
    finally:
        undeploy(options)
        ray.shutdown()


@pytest.fixture(scope="module")
def http(studio: RayStudio) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=studio.url, timeout=120) as client:
        yield client


def save_voice(http: httpx.Client, name: str, hz: float) -> None:
    files = {"audio_sample": (f"{name}.wav", voice_clip(hz=hz), "audio/wav")}
    response = http.post("/v1/audio/voices", data={"name": name, "transcript": "a test clip"}, files=files)
    assert response.status_code == 201, response.text


def history_seeds(outputs: Path) -> list[str]:
    return [str(json.loads(p.read_text())["settings"]["seed"]) for p in (outputs / "history").glob("*.json")]


def test_the_openai_client_speaks_through_the_ingress_and_the_studio_is_mounted(studio: RayStudio) -> None:
    client = openai.OpenAI(base_url=f"{studio.url}/v1", api_key="unused", max_retries=0)
    whole = client.audio.speech.create(model="tts-1", voice="default", input=TEXT, response_format="wav")
    audio, rate = decode(whole.content)
    assert rate == 24000 and abs(len(audio) / rate - 1.4) < 0.01
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="default", input=TEXT, response_format="pcm", speed=2.0
    ) as streamed:
        pcm = b"".join(streamed.iter_bytes())
    assert abs(len(pcm) / 2 / 24000 - 0.8) < 0.01  # 2 bytes a sample; twice as fast: 0.3 + 0.2 + 0.3 s
    with pytest.raises(openai.BadRequestError, match="type some text"):
        client.audio.speech.create(model="tts-1", voice="default", input="   ", response_format="wav")
    page = httpx.get(f"{studio.url}/", timeout=30)
    assert page.status_code == 200 and "gradio" in page.text.lower()
    metrics = httpx.get(f"{studio.url}/metrics", timeout=30).text
    assert 'voicelab_worker_up{device="replica 0' in metrics and 'voicelab_worker_up{device="replica 1' in metrics


def test_a_saved_voice_goes_back_to_the_replica_that_holds_its_profile(studio: RayStudio, http: httpx.Client) -> None:
    save_voice(http, "Ann", 180.0)
    save_voice(http, "Bob", 120.0)
    before = {r.replica_id: r.engine.profile_cache for r in reports()}
    misses_before = sum(c.misses for c in before.values() if c is not None)
    for voice in ("Ann", "Ann", "Bob", "Ann", "Bob", "Bob"):
        response = http.post("/v1/audio/speech", json={"input": "One line.", "voice": voice, "response_format": "wav"})
        assert response.status_code == 200, response.text

    def caches() -> list[Any]:
        return [r.engine.profile_cache for r in reports() if r.engine.profile_cache is not None]

    # Each voice's profile was built once: every later request found it on the replica it went to. The replicas
    # report every second or so, so the counts are read once the last request's hit has been reported.
    wait_for(lambda: sum(c.hits for c in caches()) >= 4, 15, "four profile hits reported")
    assert sum(c.misses for c in caches()) - misses_before == 2


def speak_in_thread(url: str, text: str, seed: int, answers: dict[int, httpx.Response]) -> threading.Thread:
    def run() -> None:
        body = {"input": text, "seed": seed, "response_format": "wav"}
        answers[seed] = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=180)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def held(report: ReplicaReport) -> bool:
    return report.queue.in_flight_text == HOLD


def queued() -> int:
    return sum(len(r.queue.queued) for r in reports())


def fill_both_replicas(studio: RayStudio, answers: dict[int, httpx.Response], first: int) -> list[threading.Thread]:
    """A held job on each replica (one after the other, so each goes to the idle one), then one waiting on each."""
    threads = [speak_in_thread(studio.url, HOLD, first, answers)]
    wait_for(lambda: sum(held(r) for r in reports()) == 1, 60, "a held job on one replica")
    threads.append(speak_in_thread(studio.url, HOLD, first + 1, answers))
    wait_for(lambda: sum(held(r) for r in reports()) == 2, 60, "a held job on each replica")
    threads.append(speak_in_thread(studio.url, TEXT, first + 2, answers))
    wait_for(lambda: queued() == 1, 60, "a job waiting on one replica")
    threads.append(speak_in_thread(studio.url, TEXT, first + 3, answers))
    wait_for(lambda: queued() == 2, 60, "a job waiting on each replica")
    return threads


def finish(studio: RayStudio, threads: list[threading.Thread]) -> None:
    studio.gate.touch()
    for thread in threads:
        thread.join(180)


def test_past_the_replicas_and_the_queue_the_api_answers_busy(studio: RayStudio) -> None:
    studio.gate.unlink(missing_ok=True)
    answers: dict[int, httpx.Response] = {}
    threads = fill_both_replicas(studio, answers, 201)
    threads += [speak_in_thread(studio.url, TEXT, seed, answers) for seed in (205, 206)]  # Serve's queue: 2
    time.sleep(1.0)
    threads.append(speak_in_thread(studio.url, TEXT, 207, answers))
    wait_for(lambda: 207 in answers, 60, "an answer to the request past the queue")
    busy = answers[207]
    assert busy.status_code == 429 and "retry-after" in busy.headers, busy.text
    assert "busy" in busy.json()["error"]["message"]
    finish(studio, threads)
    assert [answers[seed].status_code for seed in range(201, 207)] == [200] * 6


def test_the_panel_restarts_and_cleans_one_replica_while_the_other_keeps_its_worker(studio: RayStudio) -> None:
    handle = serve.get_deployment_handle("EngineReplica", app_name=APP)
    engine = ServeEngine(handle, board_handle(APP), Settings(), slots=2)  # as the ingress holds it
    try:
        panel = DevicePanel(engine)
        tabs = panel.gauges()
        assert len(tabs) == 2 and all('data-device="replica ' in tab and 'data-state="ready"' in tab for tab in tabs)
        before = [w.pid for w in engine.status().workers]
        text = panel.soft_restart(1, False)
        assert text.startswith("**Soft restart of replica 1**") and f"worker {before[1]} → " in text
        wait_for(lambda: engine.status().workers[1].pid not in (0, before[1]), 30, "replica 1's new worker")
        assert engine.status().workers[0].pid == before[0]
        assert "**Clean cache" in panel.clean_cache(0, False)
    finally:
        engine.close()


def test_a_replica_killed_mid_request_fails_that_request_alone_and_serve_brings_it_back(
    studio: RayStudio,
) -> None:
    studio.gate.unlink(missing_ok=True)
    seeds_before = set(history_seeds(studio.outputs))
    answers: dict[int, httpx.Response] = {}
    threads = fill_both_replicas(studio, answers, 301)
    victim = next(r for r in reports() if held(r))
    os.kill(victim.pid, signal.SIGKILL)  # as a node or native-code fault would: no cleanup
    time.sleep(1.0)
    finish(studio, threads)
    codes = {seed: answers[seed].status_code for seed in range(301, 305)}
    failed = [seed for seed, code in codes.items() if code != 200]
    assert len(failed) == 1 and failed[0] in (301, 302), codes  # the held job on the killed replica, alone
    error = answers[failed[0]].json()["error"]
    assert codes[failed[0]] == 503 and "replica running this request stopped" in error["message"]
    # Nothing lost or kept twice: History holds each finished request exactly once.
    new = [seed for seed in history_seeds(studio.outputs) if seed not in seeds_before]
    assert sorted(new) == sorted(str(seed) for seed in codes if seed not in failed)
    replaced = lambda: victim.replica_id not in {r.replica_id for r in reports()} and healthy(studio.url, 2)  # noqa: E731
    wait_for(replaced, 300, "the killed replica replaced by a new one")


def test_history_and_saved_voices_survive_the_ingress_replica(studio: RayStudio, http: httpx.Client) -> None:
    voices = {v["name"] for v in http.get("/v1/audio/voices").json()["data"]}
    kept = sorted(history_seeds(studio.outputs))
    ingress = [n for n in ray.util.list_named_actors(all_namespaces=True) if "StudioIngress" in str(n)]
    assert len(ingress) == 1
    entry = ingress[0]
    ray.kill(ray.get_actor(entry["name"], namespace=entry["namespace"]), no_restart=True)
    wait_for(lambda: healthy(studio.url, 2), 300, "a new ingress replica")
    after = {v["name"] for v in httpx.get(f"{studio.url}/v1/audio/voices", timeout=30).json()["data"]}
    assert {"Ann", "Bob"} <= voices == after
    response = httpx.post(f"{studio.url}/v1/audio/speech", json={"input": "Still here.", "seed": 401}, timeout=120)
    assert response.status_code == 200
    assert sorted(history_seeds(studio.outputs)) == sorted([*kept, "401"])


def test_a_replacement_replica_takes_the_tab_its_dead_predecessor_left() -> None:
    def report(replica_id: str) -> ReplicaReport:
        return ReplicaReport(replica_id, 1, "10.0.0.1", (), None, engine_status_of(), QueueView(), time.time())

    slots = ReplicaSlots(2)
    assert [r.replica_id if r else None for _, r in slots.assign([report("a"), report("b")])] == ["a", "b"]
    assert [r.replica_id if r else None for _, r in slots.assign([report("b")])] == [None, "b"]
    with pytest.raises(WorkerCrashedError, match="Replica 0 is not running"):
        slots.replica_of(0)
    assert [r.replica_id if r else None for _, r in slots.assign([report("b"), report("c")])] == ["c", "b"]
    with pytest.raises(InvalidSettingError, match="no replica 2"):
        slots.replica_of(2)


def engine_status_of() -> EngineStatus:
    return engine_status([missing_worker(0, "ready")], 0, JobCounters())


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--replicas", "2"], "--ray"),
        (["--ray", "--replicas", "0"], "at least 1"),
        (["--ray", "--detach"], "--address"),
    ],
)
def test_serve_refuses_what_it_cannot_do_in_one_sentence(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2 and words in capsys.readouterr().err
