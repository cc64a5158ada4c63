"""Honest progress as the buttons and the panel show it, against the real worker engine.

A queued job says how many jobs are ahead of it and never "processing"; a long text counts its sentences as
they arrive; the panel and a waiting Soft restart name the job in flight by its first words, never a hash;
the engine line never says "no worker yet" while a job waits or runs. The tone backend's "sleep N" text holds
the worker for N seconds, so the jobs behind it really wait.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.studio_helpers import make_studio
from voicelab.engine.client import EngineClient
from voicelab.engine.inproc import InprocClient
from voicelab.engine.jobs import Job
from voicelab.engine.messages import SynthesisRequest
from voicelab.engine.status import EngineStatus, QueueView
from voicelab.history import History
from voicelab.settings import Settings
from voicelab.ui.panel import ResourcePanel, _engine_line
from voicelab.ui.progress import count_sentences, first_words
from voicelab.voice.cache import ProfileCacheStats

TONE = "tests.fixture_backends:ToneBackend"
DEFAULTS = (1.0, 0.667, 0.8, 0.2, -1)


@pytest.fixture(scope="module")
def client() -> Iterator[EngineClient]:
    settings = Settings(backend=TONE, device="cpu", queue_size=4, job_timeout_s=60.0)
    with EngineClient(settings) as engine:
        engine.wait_ready()
        yield engine


def running(engine: EngineClient, text: str) -> Job:
    job = engine.submit(SynthesisRequest(text=text))
    deadline = time.monotonic() + 10
    while engine.status().in_flight_job != job.job_id:
        assert time.monotonic() < deadline, "job never started"
        time.sleep(0.02)
    return job


def test_a_queued_job_shows_its_place_in_line_and_never_processing(client: EngineClient, tmp_path: Path) -> None:
    studio = make_studio(client, History(tmp_path / "history"))
    first = running(client, "sleep 3")
    second = client.submit(SynthesisRequest(text="sleep 0.5"))
    statuses = [status for *_, status in studio.speak("Hello there.", *DEFAULTS)]
    assert statuses[0] == "Queued: 2 jobs ahead of you.", statuses[:3]
    assert any(s.startswith("Queued: 1 job ahead of you") for s in statuses), statuses
    waiting = [s for s in statuses if s.startswith("Queued")]
    assert waiting and not any("processing" in s.lower() for s in statuses)
    assert "latency" in statuses[-1] and "queued" in statuses[-1]
    first.result(30), second.result(30)


def test_the_panel_names_the_job_in_flight_by_its_first_words(client: EngineClient) -> None:
    job = running(client, "sleep 2")
    gauges = ResourcePanel(client, telemetry=None).gauges()
    assert "running “sleep 2” for" in gauges and job.job_id not in gauges
    assert "no worker yet" not in gauges
    job.result(30)


def test_a_soft_restart_that_waits_says_for_which_job_and_how_long(client: EngineClient) -> None:
    job = running(client, "sleep 3")
    lines = list(ResourcePanel(client, telemetry=None).soft_restart(False))
    waiting, report = lines[:-1], lines[-1]
    assert waiting and waiting[0].startswith("**Soft restart** is waiting for the job in flight, “sleep 3”, to finish:")
    seconds = [int(m.group(1)) for line in waiting if (m := re.search(r"(\d+) s so far", line))]
    assert len(seconds) == len(waiting) and seconds == sorted(seconds) and seconds[-1] >= 1
    assert report.startswith("**Soft restart** (after the job in flight)")
    assert job.result(5).duration_s > 0  # the job it waited for finished, not killed


def test_the_engine_line_says_starting_not_no_worker_while_a_job_waits() -> None:
    status = EngineStatus(False, 1, None, 0, 1, 3, 0, None, None, None, None, None)
    line = _engine_line(status, QueueView("", 0.0, ("abc",), waiting_for_worker=True))
    assert "no worker yet" not in line and "worker starting" in line
    busy = _engine_line(status, QueueView("Read this long chapter aloud for me please", 4.2, ()))
    assert "running “Read this long chapter aloud for…” for 4 s" in busy


def test_the_engine_line_counts_the_similarity_judges_device_memory() -> None:
    cache = ProfileCacheStats(size=1, capacity=8, hits=0, misses=1, device_bytes=1792, judge_bytes=83_289_976)
    status = EngineStatus(True, 0, None, 7, 0, 1, 0, None, None, None, None, None, profile_cache=cache)
    line = _engine_line(status, QueueView("", 0.0, ()))
    assert "voice profiles 1/8, hit rate 0% · similarity judge 79 MiB" in line
    unloaded = replace(cache, judge_bytes=0)  # no prompt yet: the judge has not loaded, and nothing is claimed
    assert "judge" not in _engine_line(replace(status, profile_cache=unloaded), QueueView("", 0.0, ()))


def test_long_text_counts_sentences_done_of_total(tmp_path: Path) -> None:
    settings = Settings(backend="tests.fixture_native_backend:create", backend_options="chunk_delay_s=0", device="cpu")
    text = "One sentence here. A second one! And a third? The fourth. 第五句。"
    assert count_sentences(text) == 5
    with InprocClient(settings) as engine:
        studio = make_studio(engine, History(tmp_path / "history"))
        statuses = [status for *_, status in studio.speak(text, *DEFAULTS)]
    parts = [s for s in statuses if s.startswith("Generating…")]
    assert [p.split(" ready")[0] for p in parts] == [f"Generating… sentence {i} of 5" for i in range(1, 6)]
    assert "latency" in statuses[-1]


def test_first_words_name_a_job_as_a_user_typed_it() -> None:
    assert first_words("The quick brown fox jumps over the lazy dog.") == "“The quick brown fox jumps over…”"
    assert first_words("今天天气很好，我们去公园散步吧。") == "“今天天气很好，我们去公园…”"
    assert first_words("  Hi  ") == "“Hi”"


def test_a_forced_restart_names_the_requeued_job_by_its_first_words(client: EngineClient) -> None:
    job = running(client, "sleep 3 and then some more words here")
    *_, report = ResourcePanel(client, telemetry=None).soft_restart(True)
    assert "- “sleep 3 and then some more…” was requeued and will run on the new worker" in report, report
    assert job.job_id not in report and "reserved:" not in report  # no hash, no CUDA rows on a CPU worker
    assert job.result(30).duration_s > 0  # it ran again on the new worker
