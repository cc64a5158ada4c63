"""kill -9 of the real Piper worker in the middle of a job: only that job fails, with the clear sentence.

The job in flight gets WorkerCrashedError; the jobs queued behind it run on the replacement worker; the next
request works; nothing is lost or answered twice.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import numpy as np
import pytest

from tests.test_fuzz_inputs import assert_clear_sentence
from voicelab.engine.client import EngineClient
from voicelab.engine.messages import SynthesisRequest
from voicelab.errors import WorkerCrashedError
from voicelab.settings import Settings

LONG_TEXT = " ".join(
    [
        "The old lighthouse keeper climbed the spiral stairs every evening at dusk, polished the great lens,",
        "and watched the fishing boats drift slowly out to sea while the gulls circled overhead.",
    ]
    * 4
)


@pytest.fixture(scope="module")
def engine() -> Iterator[EngineClient]:
    with EngineClient(Settings(device="cpu", torch_threads=1, queue_size=8, job_timeout_s=300.0)) as client:
        client.wait_ready()
        yield client


def _wait_in_flight(engine: EngineClient, job_id: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while engine.status().in_flight_job != job_id:
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.01)


def test_kill_9_mid_synthesis_fails_only_that_job(engine: EngineClient) -> None:
    doomed = SynthesisRequest(LONG_TEXT, seed=1)
    queued = [SynthesisRequest(f"Queued sentence number {n}.", seed=n) for n in range(3)]
    doomed_future = engine.submit(doomed)
    futures = [engine.submit(r) for r in queued]
    _wait_in_flight(engine, doomed.job_id)
    time.sleep(0.5)  # well inside the synthesis of ~40 s of speech
    old_pid = engine.status().worker_pid
    os.kill(old_pid, signal.SIGKILL)

    with pytest.raises(WorkerCrashedError) as crashed:
        doomed_future.result(timeout=120)
    assert_clear_sentence(crashed.value)
    assert str(crashed.value) == WorkerCrashedError.default_message

    results = [f.result(timeout=300) for f in futures]
    assert [r.job_id for r in results] == [r.job_id for r in queued], "queued jobs run once each, in order"
    for result in results:
        assert result.duration_s > 0.8 and np.isfinite(result.audio).all()
        assert float(np.max(np.abs(result.audio))) > 0.05
    status = engine.status()
    assert status.worker_pid not in (0, old_pid) and status.restarts == 1
    assert status.queue_length == 0 and status.in_flight_job is None


def test_the_next_request_after_the_crash_works(engine: EngineClient) -> None:
    before = engine.status()
    result = engine.synthesize(SynthesisRequest("Back to normal.", seed=2), timeout=120)
    assert result.duration_s > 0.5 and float(np.max(np.abs(result.audio))) > 0.05
    after = engine.status()
    assert after.worker_pid == before.worker_pid and after.completed == before.completed + 1


def _wait_replaced(engine: EngineClient, old_pid: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while engine.status().worker_pid in (0, old_pid):
        assert time.monotonic() < deadline, "the dead worker was never replaced"
        time.sleep(0.02)


def test_kill_9_while_idle_is_noticed_and_costs_no_job(engine: EngineClient) -> None:
    before = engine.status()
    os.kill(before.worker_pid, signal.SIGKILL)
    _wait_replaced(engine, before.worker_pid)
    result = engine.synthesize(SynthesisRequest("Nobody was waiting.", seed=3), timeout=180)
    assert result.duration_s > 0.5
    after = engine.status()
    assert after.failed == before.failed and after.restarts == before.restarts + 1


# The supervisor may hand a job to a worker that died while idle before it noticed; the worker never
# acknowledged the job (JobAccepted), so it is requeued on the new worker instead of failing.
def test_a_job_sent_right_after_an_idle_crash_is_not_failed(engine: EngineClient) -> None:
    old_pid = engine.status().worker_pid
    os.kill(old_pid, signal.SIGKILL)
    result = engine.synthesize(SynthesisRequest("Right after the crash.", seed=4), timeout=180)
    assert result.duration_s > 0.5
