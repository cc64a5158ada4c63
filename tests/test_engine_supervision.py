"""Supervision as a user meets it: a replacement worker killed while it starts is tried again, the
jobs waiting meanwhile are served instead of failing, and the counters count each job and each worker once."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable
from dataclasses import replace

import pytest

from voicelab.engine.client import EngineClient
from voicelab.engine.messages import SynthesisRequest
from voicelab.engine.proc import WorkerHandle
from voicelab.engine.status import EngineStatus
from voicelab.engine.supervisor import backoff_s
from voicelab.errors import BackendLoadError, JobTimeoutError, WorkerCrashedError
from voicelab.settings import Settings

TONE = "tests.fixture_backends:ToneBackend"


def _settings(**changes: object) -> Settings:
    return replace(Settings(backend=TONE, queue_size=8, job_timeout_s=60.0, torch_threads=1), **changes)  # type: ignore[arg-type]


def _until(engine: EngineClient, what: str, check: Callable[[EngineStatus], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check(engine.status()):
        assert time.monotonic() < deadline, f"never saw: {what}"
        time.sleep(0.01)


def test_a_replacement_killed_while_starting_is_retried_and_the_queue_is_served() -> None:
    with EngineClient(_settings()) as engine:
        engine.wait_ready(timeout=120)
        doomed_request = SynthesisRequest("sleep 5")
        doomed = engine.submit(doomed_request)
        queued = [engine.submit(SynthesisRequest(f"waiting {i}")) for i in range(3)]
        _until(engine, "the job in flight", lambda s: s.in_flight_job == doomed_request.job_id)
        first_pid = engine.status().worker_pid
        os.kill(first_pid, signal.SIGKILL)
        with pytest.raises(WorkerCrashedError):
            doomed.result(timeout=60)
        _until(engine, "a replacement starting", lambda s: s.workers[0].state == "starting" and s.workers[0].pid > 0)
        replacement = engine.status().workers[0].pid
        assert replacement != first_pid
        os.kill(replacement, signal.SIGKILL)  # killed while it loads, as the 2026-12-01 report's probe did
        assert all(job.result(timeout=120).duration_s > 0 for job in queued)
        status = engine.status()
        assert status.workers[0].pid not in (first_pid, replacement)
        assert (status.completed, status.failed, status.restarts) == (3, 1, 2)
        assert status.workers[0].start_deaths == 1


def _die_at_once(settings: Settings) -> WorkerHandle:
    """A worker process that exits before it could ever say READY (a crash while loading)."""
    context = mp.get_context("spawn")
    parent, child = context.Pipe(duplex=True)
    process = context.Process(target=os._exit, args=(3,), daemon=True)
    process.start()
    child.close()
    return WorkerHandle(process, parent, time.monotonic())


def test_jobs_wait_a_bounded_time_for_a_worker_that_keeps_dying_then_fail_with_one_sentence() -> None:
    spawned: list[float] = []

    def spawn(settings: Settings) -> WorkerHandle:
        spawned.append(time.monotonic())
        return _die_at_once(settings)

    with EngineClient(_settings(start_retries=1, worker_wait_s=3.0), spawn=spawn) as engine:
        jobs = [engine.submit(SynthesisRequest(f"nobody to run me {i}")) for i in range(2)]
        for job in jobs:
            with pytest.raises(BackendLoadError, match=r"^No engine worker became ready within 3 s, so the job"):
                job.result(timeout=60)
        status = engine.status()
        assert status.failed == 2 and status.completed == 0 and not status.ready
        assert spawned[1] - spawned[0] >= backoff_s(1)
        _until(engine, "giving up", lambda s: s.workers[0].state == "failed")
        status = engine.status()
        assert (
            status.load_error == "The engine worker stopped while starting 2 times in a row; see the log for details."
        )
        assert status.workers[0].start_deaths == 2 and status.restarts == 1


def test_a_timeout_on_one_device_replaces_only_that_worker() -> None:
    with EngineClient(_settings(devices="cpu,cpu", job_timeout_s=3.0)) as engine:
        engine.wait_ready(timeout=180)
        pids = [w.pid for w in engine.status().workers]
        slow_request = SynthesisRequest("sleep 30")
        slow = engine.submit(slow_request)
        _until(engine, "the slow job running", lambda s: s.in_flight_job == slow_request.job_id)
        victim = next(w.index for w in engine.status().workers if w.in_flight_jobs)
        served = [engine.synthesize(SynthesisRequest(f"meanwhile {i}"), timeout=60) for i in range(3)]
        with pytest.raises(JobTimeoutError, match="longer than 3 s"):
            slow.result(timeout=60)
        assert all(r.duration_s > 0 for r in served)
        _until(engine, "the timed-out worker replaced", lambda s: s.workers[victim].ready and s.restarts == 1)
        status = engine.status()
        assert status.workers[1 - victim].pid == pids[1 - victim] and status.workers[1 - victim].restarts == 0
        assert (status.failed, status.restarts) == (1, 1)
