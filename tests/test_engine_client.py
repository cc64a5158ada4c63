"""The engine as a user meets it: busy answers, crashes, timeouts and restarts that lose no queued work."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from voicelab.engine.client import EngineClient
from voicelab.engine.messages import SynthesisRequest
from voicelab.errors import BackendLoadError, EngineBusyError, JobTimeoutError, WorkerCrashedError
from voicelab.settings import Settings

TONE = "tests.fixture_backends:ToneBackend"


def _settings(**changes: object) -> Settings:
    base = {"backend": TONE, "queue_size": 3, "job_timeout_s": 60.0}
    base.update(changes)
    return Settings(**base)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def client() -> Iterator[EngineClient]:
    with EngineClient(_settings()) as engine:
        engine.wait_ready()
        yield engine


def _wait_in_flight(engine: EngineClient, job_id: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while engine.status().in_flight_job != job_id:
        assert time.monotonic() < deadline, "job never started"
        time.sleep(0.02)


def test_result_has_audio_of_the_right_length(client: EngineClient) -> None:
    text = "Hello there. A second sentence."
    result = client.synthesize(SynthesisRequest(text, sentence_silence_s=0.5), timeout=30)
    expected = (len("Hello there.") + len("A second sentence.")) * 0.02 + 0.5
    assert result.duration_s == pytest.approx(expected, abs=0.01)
    assert result.backend == "tone" and result.device == "cpu"


def test_full_queue_answers_busy_and_loses_nothing(client: EngineClient) -> None:
    blocker_request = SynthesisRequest("sleep 1")
    blocker = client.submit(blocker_request)
    _wait_in_flight(client, blocker_request.job_id)
    queued = [client.submit(SynthesisRequest(f"queued number {i}")) for i in range(3)]
    with pytest.raises(EngineBusyError, match="busy"):
        client.submit(SynthesisRequest("one too many"))
    results = [f.result(timeout=30) for f in [blocker, *queued]]
    assert len({r.job_id for r in results}) == 4
    assert results[0].job_id == blocker_request.job_id


def test_kill_9_mid_job_fails_only_that_job(client: EngineClient) -> None:
    doomed_request = SynthesisRequest("sleep 5")
    doomed = client.submit(doomed_request)
    queued = [client.submit(SynthesisRequest(f"waiting {i}")) for i in range(2)]
    _wait_in_flight(client, doomed_request.job_id)
    restarts = client.status().restarts
    os.kill(client.status().worker_pid, signal.SIGKILL)
    with pytest.raises(WorkerCrashedError, match="stopped unexpectedly"):
        doomed.result(timeout=30)
    assert [f.result(timeout=60).duration_s > 0 for f in queued] == [True, True]
    assert client.status().restarts == restarts + 1
    assert client.synthesize(SynthesisRequest("next one works"), timeout=30).duration_s > 0


def test_native_crash_inside_a_job_is_recovered(client: EngineClient) -> None:
    with pytest.raises(WorkerCrashedError):
        client.synthesize(SynthesisRequest("crash! please"), timeout=60)
    assert client.synthesize(SynthesisRequest("still alive"), timeout=60).duration_s > 0


def test_timeout_restarts_the_worker_and_keeps_the_queue() -> None:
    with EngineClient(_settings(job_timeout_s=1.5)) as engine:
        engine.wait_ready()
        slow = engine.submit(SynthesisRequest("sleep 30"))
        after = engine.submit(SynthesisRequest("after the slow one"))
        with pytest.raises(JobTimeoutError, match="longer than 2 s"):
            slow.result(timeout=30)
        assert after.result(timeout=60).duration_s > 0
        assert engine.status().restarts == 1


def test_soft_restart_waits_for_the_running_job(client: EngineClient) -> None:
    request = SynthesisRequest("sleep 1")
    running = client.submit(request)
    queued = client.submit(SynthesisRequest("queued across the restart"))
    _wait_in_flight(client, request.job_id)
    old_pid = client.status().worker_pid
    report = client.soft_restart()
    assert running.done() and running.exception() is None
    assert report.old_pid == old_pid != report.new_pid
    assert report.time_to_ready_s > 0 and report.requeued_job is None
    assert queued.result(timeout=30).duration_s > 0


def test_forced_soft_restart_requeues_the_running_job(client: EngineClient) -> None:
    request = SynthesisRequest("sleep 3")
    running = client.submit(request)
    _wait_in_flight(client, request.job_id)
    report = client.soft_restart(force=True)
    assert report.forced and report.requeued_job == request.job_id
    assert running.result(timeout=60).job_id == request.job_id


def test_clean_cache_runs_between_jobs(client: EngineClient) -> None:
    request = SynthesisRequest("sleep 1")
    running = client.submit(request)
    _wait_in_flight(client, request.job_id)
    report = client.clean_cache()
    assert running.done(), "clean cache must wait for the job in flight"
    assert any(item.startswith("Python garbage") for item in report.cleared)
    assert report.after.worker_pid == client.status().worker_pid


def test_heartbeat_keeps_stats_fresh_during_a_job(client: EngineClient) -> None:
    request = SynthesisRequest("sleep 2.5")
    running = client.submit(request)
    _wait_in_flight(client, request.job_id)
    time.sleep(1.6)
    status = client.status()
    assert status.in_flight_job == request.job_id
    assert status.last_heartbeat_age_s is not None and status.last_heartbeat_age_s < 1.5
    assert status.last_stats is not None and status.last_stats.worker_rss > 10 * 2**20
    running.result(timeout=30)


def test_missing_voice_file_is_reported_not_fatal(tmp_path: object) -> None:
    missing = os.path.join(str(tmp_path), "no-such-voice.onnx")
    with EngineClient(_settings(voice_path=missing)) as engine:
        with pytest.raises(BackendLoadError, match="does not exist"):
            engine.wait_ready(timeout=60)
        with pytest.raises(BackendLoadError, match="does not exist"):
            engine.synthesize(SynthesisRequest("hello"), timeout=60)


def test_engine_imports_without_gradio() -> None:
    code = (
        "import sys; sys.modules['gradio'] = None\n"
        "from voicelab.engine.client import EngineClient\n"
        "from voicelab.engine.core import EngineCore\n"
        "from voicelab.engine.messages import SynthesisRequest\n"
        "assert 'gradio' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(os.path.dirname(__file__)))
