"""Two workers behind one studio (``--devices cpu,cpu``): jobs spread over both, a crash or restart of one
touches only its own jobs while the other keeps serving, and each worker has its own controls."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from voicelab.engine.client import EngineClient
from voicelab.engine.messages import SynthesisRequest
from voicelab.engine.status import EngineStatus, RestartReport
from voicelab.errors import InvalidSettingError, WorkerCrashedError
from voicelab.settings import Settings

TONE = "tests.fixture_backends:ToneBackend"


@pytest.fixture(scope="module")
def pair() -> Iterator[EngineClient]:
    settings = Settings(backend=TONE, devices="cpu,cpu", queue_size=8, job_timeout_s=60.0, torch_threads=1)
    with EngineClient(settings) as engine:
        engine.wait_ready(timeout=180)
        yield engine


def _until(engine: EngineClient, what: str, check: Callable[[EngineStatus], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check(engine.status()):
        assert time.monotonic() < deadline, f"never saw: {what}"
        time.sleep(0.02)


def _running_on(engine: EngineClient, job_id: str) -> int:
    """The index of the worker that has accepted ``job_id``, waiting until one has."""
    _until(engine, f"{job_id} in flight", lambda s: any(job_id in w.in_flight_jobs for w in s.workers))
    return next(w.index for w in engine.status().workers if job_id in w.in_flight_jobs)


def _pids(engine: EngineClient) -> list[int]:
    return [w.pid for w in engine.status().workers]


def test_both_workers_are_ready_with_their_own_process(pair: EngineClient) -> None:
    status = pair.status()
    assert [w.state for w in status.workers] == ["ready", "ready"]
    assert len(set(_pids(pair))) == 2 and 0 not in _pids(pair)
    assert [w.label for w in status.workers] == ["cpu #0", "cpu #1"]
    assert all(w.last_heartbeat_age_s is not None for w in status.workers)


def test_two_jobs_run_at_the_same_time_on_different_workers(pair: EngineClient) -> None:
    first, second = SynthesisRequest("sleep 1.5"), SynthesisRequest("sleep 1.5")
    jobs = [pair.submit(first), pair.submit(second)]
    _until(pair, "both in flight at once", lambda s: all(w.in_flight_jobs for w in s.workers))
    assert _running_on(pair, first.job_id) != _running_on(pair, second.job_id)
    assert all(job.result(timeout=60).duration_s > 0 for job in jobs)


def test_a_lone_user_is_spread_over_the_devices(pair: EngineClient) -> None:
    before = [w.completed for w in pair.status().workers]
    for i in range(4):
        pair.synthesize(SynthesisRequest(f"one after another {i}"), timeout=60)
    after = [w.completed for w in pair.status().workers]
    assert [b - a for a, b in zip(before, after, strict=True)] == [2, 2]


def test_kill_9_of_one_worker_fails_only_its_job_and_the_other_keeps_serving(pair: EngineClient) -> None:
    before = pair.status()
    doomed_request, other_request = SynthesisRequest("sleep 4"), SynthesisRequest("sleep 2")
    doomed, other = pair.submit(doomed_request), pair.submit(other_request)
    victim = _running_on(pair, doomed_request.job_id)
    survivor = 1 - victim
    assert _running_on(pair, other_request.job_id) == survivor
    queued = [pair.submit(SynthesisRequest(f"queued behind {i}")) for i in range(3)]
    os.kill(before.workers[victim].pid, signal.SIGKILL)
    with pytest.raises(WorkerCrashedError, match="stopped unexpectedly"):
        doomed.result(timeout=60)
    assert other.result(timeout=60).duration_s > 0
    assert all(job.result(timeout=120).duration_s > 0 for job in queued)
    after = pair.status()
    assert after.failed == before.failed + 1 and after.restarts == before.restarts + 1
    assert after.workers[survivor].pid == before.workers[survivor].pid
    assert after.workers[survivor].restarts == before.workers[survivor].restarts
    _until(pair, "the victim replaced", lambda s: s.workers[victim].ready)
    assert pair.status().workers[victim].pid != before.workers[victim].pid


def test_soft_restart_of_one_worker_leaves_the_other_serving(pair: EngineClient) -> None:
    pids = _pids(pair)
    blocker = SynthesisRequest("sleep 2")
    running = pair.submit(blocker)
    target = _running_on(pair, blocker.job_id)
    reports: list[RestartReport] = []
    thread = threading.Thread(target=lambda: reports.append(pair.soft_restart(worker=target)))
    thread.start()
    _until(pair, "restarting", lambda s: s.workers[target].state == "restarting")
    # While it waits for its job and restarts, new work goes only to the other worker.
    other_done = pair.status().workers[1 - target].completed
    served = pair.synthesize(SynthesisRequest("served meanwhile"), timeout=60)
    assert pair.status().workers[1 - target].completed == other_done + 1
    thread.join(120)
    assert running.result(timeout=1).duration_s > 0 and served.duration_s > 0
    after = _pids(pair)
    assert after[1 - target] == pids[1 - target] and after[target] != pids[target]
    assert reports[0].old_pid == pids[target] and reports[0].device == f"cpu #{target}"


def test_clean_cache_acts_on_one_worker_or_on_all(pair: EngineClient) -> None:
    pids = _pids(pair)
    one = pair.clean_cache(worker=1)
    assert one.after.worker_pid == pids[1]
    every = pair.clean_cache()
    assert every.before.device == "cpu+cpu" and every.after.worker_rss > one.after.worker_rss
    assert any(item.startswith("Python garbage") for item in every.cleared)
    with pytest.raises(InvalidSettingError, match="no worker 2"):
        pair.clean_cache(worker=2)


def test_a_soft_restart_of_all_replaces_them_one_after_another(pair: EngineClient) -> None:
    pids = _pids(pair)
    report = pair.soft_restart()
    assert [r.old_pid for r in report.workers] == pids
    assert not set(_pids(pair)) & set(pids)
    assert pair.synthesize(SynthesisRequest("after both restarts"), timeout=60).duration_s > 0


def test_the_panel_has_a_tab_per_device_with_its_own_gauges_and_buttons(pair: EngineClient, tmp_path: Path) -> None:
    from voicelab.ui.app_ui import build_ui
    from voicelab.ui.devices import DevicePanel

    demo = build_ui(pair, replace(pair.settings, outputs_dir=str(tmp_path)))
    ids = {block.elem_id for block in demo.blocks.values()}
    assert {"device-0-gauges", "device-1-clean", "device-1-restart"} <= ids
    panel = DevicePanel(pair)
    shown = panel.gauges()
    pids = _pids(pair)
    assert [f'data-device="cpu #{i}"' in block for i, block in enumerate(shown)] == [True, True]
    assert all(f"pid {pid}" in block and "ready" in block for pid, block in zip(pids, shown, strict=True))
    assert panel.clean_cache(0, False).startswith("**Clean cache on cpu**")
    text = panel.soft_restart(1, False)
    assert text.startswith(f"**Soft restart of cpu #1** (after its job): worker {pids[1]} → ")
    assert _pids(pair)[0] == pids[0] and _pids(pair)[1] != pids[1]


def test_the_takes_of_one_request_run_on_both_devices_at_once(pair: EngineClient) -> None:
    from voicelab.studio import GenerationRequest, GenerationService

    service = GenerationService(pair, None, pair.settings)
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(service.generate(GenerationRequest("sleep 1.5", takes=3))))
    thread.start()
    _until(pair, "two takes in flight at once", lambda s: all(w.in_flight_jobs for w in s.workers))
    thread.join(120)
    takes = getattr(done[0], "takes", ())
    assert len(takes) == 3 and len({t.result.seed for t in takes}) == 3


def test_metrics_and_health_name_each_device(pair: EngineClient) -> None:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import Metric
    from prometheus_client.registry import Collector

    from voicelab.api.metrics import worker_metrics
    from voicelab.api.ops import worker_body

    status = pair.status()

    class Workers(Collector):
        def collect(self) -> Iterator[Metric]:
            yield from worker_metrics(status)

    registry = CollectorRegistry()
    registry.register(Workers())
    text = generate_latest(registry).decode()
    assert 'voicelab_worker_up{device="cpu #0"} 1.0' in text and 'voicelab_worker_up{device="cpu #1"} 1.0' in text
    restarts = [w.restarts for w in status.workers]
    assert f'voicelab_device_worker_restarts_total{{device="cpu #1"}} {restarts[1]:.1f}' in text
    assert [worker_body(w)["pid"] for w in status.workers] == _pids(pair)
    assert {worker_body(w)["state"] for w in status.workers} == {"ready"}


def test_a_forced_restart_of_one_worker_runs_its_job_again(pair: EngineClient) -> None:
    request = SynthesisRequest("sleep 3")
    running = pair.submit(request)
    target = _running_on(pair, request.job_id)
    report = pair.soft_restart(force=True, worker=target)
    assert report.forced and report.requeued_job == request.job_id
    assert running.result(timeout=60).job_id == request.job_id
