"""/v1/audio/speech and /v1/audio/voices as users drive them: the real ``openai`` client and raw HTTP against a
server on 127.0.0.1 (worker process, the streaming native test backend: one chunk per sentence, each sentence
0.05 s per character / speed, 0.2 s of silence between sentences, a tone at the prompt's pitch)."""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from tests.api_server import NATIVE, LiveServer, decode, live_server, voice_clip
from tests.fixture_native_backend import HOLD, prompt_pitch_hz
from voicelab.settings import Settings

TEXT = "Hello there. How are you?"  # two sentences of 12 characters: 0.6 s + 0.2 s + 0.6 s
TEXT_S = 1.4


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    outputs = tmp_path_factory.mktemp("api-outputs")
    gate = tmp_path_factory.mktemp("api-gate") / "open"  # created by the test that holds a job in flight
    settings = Settings(
        backend=NATIVE,
        outputs_dir=str(outputs),
        backend_options=f"chunk_delay_s=0.05,gate_file={gate},fit_steps=3",
        queue_size=1,
        max_text_chars=2000,
        max_upload_mb=1,
    )
    with live_server(settings) as live:
        yield live


@pytest.fixture(scope="module")
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def ann(http: httpx.Client) -> dict[str, object]:
    """A saved voice at 180 Hz."""
    files = {"audio_sample": ("ann.wav", voice_clip(hz=180.0), "audio/wav")}
    response = http.post("/v1/audio/voices", data={"name": "Ann", "transcript": "a test clip"}, files=files)
    assert response.status_code == 201, response.text
    return dict(response.json())


def speech(http: httpx.Client, **body: object) -> httpx.Response:
    return http.post("/v1/audio/speech", json={"input": TEXT, "response_format": "wav", **body})


def assert_error(response: httpx.Response, status: int, kind: str, words: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == kind and words in error["message"]
    return dict(error)


def test_the_openai_client_speaks_whole_and_streamed_in_a_saved_voice_with_an_instruction(
    server: LiveServer, ann: dict[str, object]
) -> None:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    whole = client.audio.speech.create(model="tts-1", voice="default", input=TEXT, response_format="wav")
    audio, rate = decode(whole.content)
    assert rate == 24000 and abs(len(audio) / rate - TEXT_S) < 0.01
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="Ann", input=TEXT, instructions="Speak loudly.", response_format="pcm", speed=2.0
    ) as streamed:
        pieces = [piece for piece in streamed.iter_bytes() if piece]
    samples = np.frombuffer(b"".join(pieces), dtype="<i2").astype(np.float32) / 32768
    assert len(pieces) >= 2  # one per sentence, as they were ready
    assert abs(len(samples) / 24000 - (0.3 + 0.2 + 0.3)) < 0.01  # speed 2 halves each sentence
    assert abs(prompt_pitch_hz(samples, 24000) - 180.0) < 8  # Ann's pitch, not the default 220 Hz
    loud, plain = np.abs(samples).max(), np.abs(audio).max()
    assert loud > plain * 1.3  # the instruction reached the backend


@pytest.mark.parametrize(("fmt", "tolerance"), [("wav", 0.01), ("flac", 0.01), ("opus", 0.03), ("mp3", 0.12)])
def test_every_file_format_decodes_to_the_whole_utterance(http: httpx.Client, fmt: str, tolerance: float) -> None:
    response = speech(http, response_format=fmt)
    assert response.status_code == 200, response.text
    audio, rate = decode(response.content)
    assert abs(len(audio) / rate - TEXT_S) < tolerance
    assert response.headers["x-sample-rate"] == str(rate)


def test_pcm_is_raw_16_bit_at_the_announced_rate(http: httpx.Client) -> None:
    response = speech(http, response_format="pcm", seed=7)
    assert response.headers["content-type"] == "audio/pcm" and response.headers["x-seed"] == "7"
    assert len(response.content) == round(TEXT_S * int(response.headers["x-sample-rate"])) * 2


def test_srt_gives_one_cue_per_sentence_at_its_time(http: httpx.Client) -> None:
    response = speech(http, response_format="srt")
    assert response.status_code == 200
    assert response.text == (
        "1\n00:00:00,000 --> 00:00:00,600\nHello there.\n\n2\n00:00:00,800 --> 00:00:01,400\nHow are you?\n"
    )


def test_sse_sends_base64_deltas_then_done(http: httpx.Client) -> None:
    response = speech(http, stream_format="sse")
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]
    assert [e["type"] for e in events][-1] == "speech.audio.done" and events[-1]["usage"]["input_tokens"] == len(TEXT)
    figures = events[-1]["voicelab"]  # the take's figures: what synth prints and History keeps
    assert figures["job_id"] == response.headers["x-job-id"] and figures["seed"] == int(response.headers["x-seed"])
    assert figures["similarity"] is None and figures["similarity_ge2e"] is None  # no prompt: nothing to compare
    body = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    audio, rate = decode(body)
    assert abs(len(audio) / rate - TEXT_S) < 0.01


def test_sse_tells_a_voices_fit_step_by_step_before_its_audio(http: httpx.Client, ann: dict[str, object]) -> None:
    """A new voice's fit can take minutes on a CPU (Kokoro): an SSE caller sees its steps as they happen, as the
    studio's status line does, instead of silence until the first audio; plain audio streams are unchanged."""
    response = speech(http, voice="ann", stream_format="sse")
    events = [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]
    kinds = [e["type"] for e in events]
    progress = [e for e in events if e["type"] == "voicelab.progress"]
    assert [(e["step"], e["total"]) for e in progress] == [(1, 3), (2, 3), (3, 3)]
    assert progress[-1]["message"] == "fitting voice: step 3 of 3"
    assert kinds.index("speech.audio.delta") > kinds.index("voicelab.progress") and kinds[-1] == "speech.audio.done"
    audio, rate = decode(b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta"))
    assert abs(len(audio) / rate - TEXT_S) < 0.01 and abs(prompt_pitch_hz(audio, rate) - 180.0) < 8
    assert rate == int(response.headers["x-sample-rate"])


def test_a_voice_by_id_object_and_by_id_string(http: httpx.Client, ann: dict[str, object]) -> None:
    for voice in ({"id": ann["id"]}, ann["id"], "ann"):
        audio, rate = decode(speech(http, voice=voice).content)
        assert abs(prompt_pitch_hz(audio, rate) - 180.0) < 8


def test_user_mistakes_get_their_status_and_sentence(http: httpx.Client) -> None:
    assert_error(speech(http, input="   "), 400, "invalid_request_error", "Please type some text")
    assert assert_error(speech(http, speed=9), 400, "invalid_request_error", "between 0.25 and 4")["param"] == "speed"
    assert_error(speech(http, response_format="aac"), 400, "invalid_request_error", "response_format")
    assert_error(speech(http, language="fr"), 400, "invalid_request_error", "not available")
    assert_error(speech(http, voice="alloy"), 404, "not_found_error", "no saved voice called 'alloy'")
    assert_error(speech(http, voice={"id": "../../etc/passwd"}), 404, "not_found_error", "no saved voice")
    assert_error(speech(http, input="x" * 2001), 413, "invalid_request_error", "the limit is 2,000")
    assert_error(speech(http, response_format="srt", stream_format="sse"), 400, "invalid_request_error", "srt")
    assert_error(
        http.post("/v1/audio/speech", content=b"{", headers={"content-type": "application/json"}),
        400,
        "invalid_request_error",
        "JSON",
    )


def wait_for(server: LiveServer, ready: Callable[[dict[str, Any]], bool]) -> None:
    """Until /health shows the engine in the state the caller holds it in (bounded, so a failure cannot hang)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not ready(httpx.get(f"{server.url}/health").json()):
        time.sleep(0.05)


def held_then_queued(server: LiveServer, first: threading.Thread, second: threading.Thread) -> None:
    """Start ``first`` (its text holds it in flight at the gate), then ``second`` once the first is in flight (sent
    together, the second could find the first still queued: the queue of one would then be full), until it waits."""
    first.start()
    wait_for(server, lambda health: bool(health["in_flight"]))
    second.start()
    wait_for(server, lambda health: bool(health["in_flight"]) and health["queue_length"] == 1)


def busy_answers(server: LiveServer) -> float:
    """How many requests the server has answered busy so far (its metrics)."""
    metrics = httpx.get(f"{server.url}/metrics").text
    found = re.search(r'^voicelab_requests_total\{outcome="busy"\} (\S+)$', metrics, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_two_clients_streaming_at_once_both_get_complete_audio(server: LiveServer) -> None:
    """The first client's stream is held at its gate while the second's job waits, so both streams are open at once."""
    gate = Path(server.settings.backend_option("gate_file"))
    gate.unlink(missing_ok=True)
    results: dict[int, bytes] = {}
    texts = {1: f"Client 1 speaks now. {HOLD} And goes on a while. Then stops.",
             2: "Client 2 speaks now. And goes on a while. Then stops."}  # fmt: skip

    def stream(n: int) -> None:
        body = {"input": texts[n], "response_format": "pcm"}
        with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body, timeout=180) as response:
            results[n] = b"".join(response.iter_bytes()) if response.status_code == 200 else b""

    threads = [threading.Thread(target=stream, args=(n,)) for n in (1, 2)]
    try:
        held_then_queued(server, *threads)
    finally:
        gate.touch()  # the held job goes on (also when the wait above failed: nothing hangs)
    for thread in threads:
        thread.join(120)
    gate.unlink()
    expected_s = {1: (20 + 8 + 20 + 11) * 0.05 + 3 * 0.2, 2: (20 + 20 + 11) * 0.05 + 2 * 0.2}  # characters, silences
    for n in (1, 2):
        assert abs(len(results[n]) / 2 / 24000 - expected_s[n]) < 0.01, n


def test_a_full_queue_answers_429_with_retry_after(server: LiveServer) -> None:
    """The first job is held in flight at its gate until the refusal is in, so the queue is full by construction."""
    gate = Path(server.settings.backend_option("gate_file"))
    gate.unlink(missing_ok=True)
    answers: list[int] = []
    busy_before = busy_answers(server)

    def run(text: str) -> None:
        response = httpx.post(f"{server.url}/v1/audio/speech", json={"input": text}, timeout=180)
        answers.append(response.status_code)

    threads = [
        threading.Thread(target=run, args=(f"Held in flight. {HOLD} Then it ends.",)),
        threading.Thread(target=run, args=("Queued behind it.",)),
    ]
    try:
        held_then_queued(server, *threads)  # the queue (size 1) is full
        refused = httpx.post(f"{server.url}/v1/audio/speech", json={"input": "One more."}, timeout=30)
    finally:
        gate.touch()  # the held job goes on (also when an assertion above failed: nothing hangs)
    for thread in threads:
        thread.join(120)
    gate.unlink()
    assert_error(refused, 429, "rate_limit_error", "busy")
    assert refused.headers["retry-after"] == "2"
    assert answers == [200, 200]
    assert busy_answers(server) == busy_before + 1


def test_saved_voices_are_listed_fetched_and_deleted(http: httpx.Client, server: LiveServer) -> None:
    files = {"audio_sample": ("bo.flac", voice_clip(hz=150.0), "audio/flac")}
    created = http.post("/v1/audio/voices", data={"name": "Bo"}, files=files).json()
    assert created["object"] == "audio.voice" and created["name"] == "Bo" and created["id"].startswith("voice_")
    assert "Bo" in [v["name"] for v in http.get("/v1/audio/voices").json()["data"]]
    assert http.get(f"/v1/audio/voices/{created['id']}").json()["created_at"] == created["created_at"]
    assert Path(server.settings.outputs_dir, "voices", f"{created['id']}.json").is_file()
    assert http.delete(f"/v1/audio/voices/{created['id']}").json() == {
        "object": "audio.voice.deleted",
        "id": created["id"],
        "deleted": True,
    }
    assert_error(http.get(f"/v1/audio/voices/{created['id']}"), 404, "not_found_error", "no saved voice")
    assert_error(http.delete(f"/v1/audio/voices/{created['id']}"), 404, "not_found_error", "no saved voice")


def test_voice_uploads_are_checked(http: httpx.Client, ann: dict[str, object]) -> None:
    def upload(name: str, data: bytes) -> httpx.Response:
        return http.post("/v1/audio/voices", data={"name": name}, files={"audio_sample": ("c.wav", data, "audio/wav")})

    assert_error(upload("ANN", voice_clip()), 400, "invalid_request_error", "already called 'ANN'")
    assert_error(upload("../evil", voice_clip()), 400, "invalid_request_error", "must start with a letter")
    assert_error(upload("default", voice_clip()), 400, "invalid_request_error", "reserved")
    assert_error(upload("Quiet", voice_clip(seconds=3)[:44] + bytes(96000)), 400, "invalid_request_error", "silent")
    assert_error(upload("Big", bytes(2 * 2**20)), 413, "invalid_request_error", "larger than 1 MB")
    assert_error(http.post("/v1/audio/voices", data={"name": "x"}), 400, "invalid_request_error", "audio_sample")
