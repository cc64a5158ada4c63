"""Work that touches the device runs on reused threads, never a new thread per job.

PyTorch keeps cuDNN's execution plans per thread, so a new thread per job planned every convolution again: on the
H200 that made CosyVoice's first vocoder call in the worker 3-4x slower than in a long-lived thread (2026-12-02).
These tests pin the property that fixed it: the worker's job runner and the backend's micro-batch threads hand one
job after another to the same threads, start no more than their size, and survive a failing job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from voicelab.backends.base import AudioChunk, SpeechRequest
from voicelab.backends.threaded import ReusedThreads, concurrent_events
from voicelab.engine.proc import _JobRunner


def _run_and_wait(threads: ReusedThreads, work: Any) -> None:
    done = threading.Event()

    def then_done() -> None:
        work()
        done.set()

    threads.run(then_done)
    assert done.wait(10)


def test_one_job_after_another_runs_on_the_same_thread_set_up_once() -> None:
    setups: list[threading.Thread] = []
    threads = ReusedThreads("test", setup=lambda: setups.append(threading.current_thread()))
    seen: list[threading.Thread] = []
    for _ in range(5):
        _run_and_wait(threads, lambda: seen.append(threading.current_thread()))
    assert len(set(seen)) == 1 and setups == seen[:1]
    assert [t.name for t in threads.threads] == ["test-0"] and threads.threads[0].daemon


def test_work_side_by_side_gets_a_thread_each_and_later_work_reuses_them() -> None:
    threads = ReusedThreads("test")
    together = threading.Barrier(3, timeout=10)
    seen: list[threading.Thread] = []

    def side_by_side() -> None:
        seen.append(threading.current_thread())
        together.wait()

    for _ in range(3):
        threads.run(side_by_side)
    deadline = time.monotonic() + 10
    while len(seen) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    for _ in range(3):
        _run_and_wait(threads, lambda: seen.append(threading.current_thread()))
    assert len(seen) == 6 and len(set(seen)) == 3 and len(threads.threads) == 3


def test_a_failing_job_leaves_its_thread_serving(caplog: pytest.LogCaptureFixture) -> None:
    threads = ReusedThreads("test")
    threads.run(lambda: 1 / 0)
    deadline = time.monotonic() + 10
    while not any("unexpected error" in r.message for r in caplog.records) and time.monotonic() < deadline:
        time.sleep(0.01)
    threads.threads[0].join(0.2)
    assert threads.threads[0].is_alive()
    seen: list[threading.Thread] = []
    _run_and_wait(threads, lambda: seen.append(threading.current_thread()))
    assert seen == [threads.threads[0]]


@dataclass
class _Core:
    """What ``_JobRunner`` reads of ``EngineCore``: capabilities, device, run_batch, after_job."""

    threads: list[threading.Thread] = field(default_factory=list)  # objects: a thread's ident may be reused
    capabilities: Any = field(default_factory=lambda: SimpleNamespace(concurrent_jobs=4))
    device: str = "cpu"

    def run_batch(self, requests: Any, emit: Any, done: Any) -> None:
        self.threads.append(threading.current_thread())
        for i in range(len(requests)):
            done(i, RuntimeError("no model in this test"))

    def after_job(self) -> None:
        return None


def test_the_worker_runs_one_job_after_another_on_the_same_thread() -> None:
    core, sent = _Core(), list[object]()
    runner = _JobRunner(core, SimpleNamespace(send=sent.append))  # type: ignore[arg-type]
    for n in range(4):
        runner.submit((SimpleNamespace(job_id=f"j{n}"),))  # type: ignore[arg-type]
        runner.drain()
    assert len(core.threads) == 4 and len(set(core.threads)) == 1
    assert threading.current_thread() not in core.threads  # not the serving loop: a job may join while one runs


def test_a_micro_batch_after_another_reuses_the_request_threads() -> None:
    threads = ReusedThreads("request")
    seen: list[threading.Thread] = []
    together = threading.Barrier(3, timeout=10)  # a micro-batch's requests run side by side

    def synthesize(request: SpeechRequest) -> Iterator[AudioChunk]:
        seen.append(threading.current_thread())
        together.wait()
        yield AudioChunk(np.zeros(4, dtype=np.float32), 16000)

    requests = [SpeechRequest(text=str(n), language="en") for n in range(3)]
    for _ in range(3):
        events = list(concurrent_events(requests, synthesize, nullcontext, threads))
        assert sum(event.last for event in events) == 3 and not any(event.error for event in events)
    assert len(seen) == 9 and len(set(seen)) == 3 and len(threads.threads) == 3
