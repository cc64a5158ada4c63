"""Micro-batching as callers meet it: who shares a batch, who waits (and how long at most), and that every job
still gets its own chunks, in order, and its own result or error."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.fixture_batched_backend import BatchedToneBackend
from voicelab.backends.base import Capabilities, SpeechRequest
from voicelab.engine.client import EngineClient
from voicelab.engine.messages import SynthesisRequest
from voicelab.engine.microbatch import BatchLimits, MicroBatcher
from voicelab.errors import BackendRuntimeError, WorkerCrashedError
from voicelab.settings import Settings

WINDOW = 0.010
CAPS = Capabilities(languages=("en", "zh"), sample_rate=16000, batching=True, batch_bytes_per_char=100)


@dataclass
class Queued:
    request: SynthesisRequest
    alone: bool = False


def queue_of(*texts: str, at: float = 100.0, **fields: object) -> deque[Queued]:
    return deque(Queued(SynthesisRequest(t, submitted_at=at, **fields)) for t in texts)  # type: ignore[arg-type]


def test_a_lone_caller_is_never_held() -> None:
    batcher = MicroBatcher(BatchLimits(window_s=WINDOW))
    queue = queue_of("Hello there.")
    assert batcher.hold_s(queue, CAPS, now=100.0) == 0.0
    assert [q.request.text for q in batcher.take(queue, CAPS)] == ["Hello there."]
    # Still alone: the next request goes at once too.
    assert batcher.hold_s(queue_of("Again.", at=101.0), CAPS, now=101.0) == 0.0


def test_after_a_busy_batch_a_lone_job_waits_at_most_the_window_then_callers_are_alone_again() -> None:
    batcher = MicroBatcher(BatchLimits(window_s=WINDOW))
    batcher.take(queue_of("a.", "b.", "c.", "d."), CAPS)
    batcher.device_free(100.0)
    lone = queue_of("Only me now.", at=100.0)
    held = [batcher.hold_s(lone, CAPS, now=100.0 + dt) for dt in (0.0, 0.004, 0.009, 0.010, 5.0)]
    assert 0 < held[0] <= WINDOW
    assert held[0] > held[1] > held[2] > 0
    assert held[3] == 0.0 and held[4] == 0.0  # never beyond the window
    assert len(batcher.take(lone, CAPS)) == 1
    assert batcher.hold_s(queue_of("Me again.", at=200.0), CAPS, now=200.0) == 0.0


def test_the_wait_ends_as_soon_as_everyone_from_the_last_batch_is_back() -> None:
    batcher = MicroBatcher(BatchLimits(window_s=WINDOW))
    batcher.take(queue_of("a.", "b.", "c."), CAPS)
    assert batcher.hold_s(queue_of("x.", "y."), CAPS, now=100.0) > 0
    assert batcher.hold_s(queue_of("x.", "y.", "z."), CAPS, now=100.0) == 0.0


def test_incompatible_jobs_go_in_the_next_batch_in_their_order() -> None:
    batcher = MicroBatcher(BatchLimits(window_s=WINDOW))
    queue = queue_of("First in English.", "第一句中文。", "Second in English.", "第二句中文。")
    assert [q.request.text for q in batcher.take(queue, CAPS)] == ["First in English.", "Second in English."]
    assert [q.request.text for q in batcher.take(queue, CAPS)] == ["第一句中文。", "第二句中文。"]
    split = Capabilities(languages=("en",), sample_rate=16000, batching=True, batch_split_options=("mode",))
    mixed = deque(Queued(SynthesisRequest(f"n{i}.", options={"mode": float(i % 2)})) for i in range(4))
    assert [q.request.text for q in batcher.take(mixed, split)] == ["n0.", "n2."]


def test_the_memory_estimate_bounds_the_batch_and_the_first_job_always_goes() -> None:
    text = "x" * 100  # 100 characters x 100 bytes = 10 kB each
    batcher = MicroBatcher(BatchLimits(window_s=WINDOW, memory_bytes=25_000))
    queue = queue_of(text, text, text, text)
    assert len(batcher.take(queue, CAPS)) == 2
    huge = MicroBatcher(BatchLimits(window_s=WINDOW, memory_bytes=1))
    assert len(huge.take(queue_of(text, text), CAPS)) == 1
    assert len(MicroBatcher(BatchLimits(window_s=WINDOW, max_jobs=3)).take(queue_of(*"abcde"), CAPS)) == 3


def test_a_job_rerun_after_a_crash_in_a_batch_shares_no_batch() -> None:
    batcher = MicroBatcher(BatchLimits(window_s=WINDOW))
    queue = queue_of("a.", "b.", "c.")
    queue[1].alone = True
    assert [q.request.text for q in batcher.take(queue, CAPS)] == ["a.", "c."]
    assert [q.request.text for q in batcher.take(queue, CAPS)] == ["b."]
    queue = queue_of("d.", "e.")
    queue[0].alone = True
    assert [q.request.text for q in batcher.take(queue, CAPS)] == ["d."]


def test_a_backend_without_a_batched_entry_point_or_a_zero_window_runs_one_at_a_time() -> None:
    plain = Capabilities(languages=("en",), sample_rate=16000)
    assert len(MicroBatcher(BatchLimits(window_s=WINDOW)).take(queue_of("a.", "b."), plain)) == 1
    assert len(MicroBatcher(BatchLimits(window_s=0.0)).take(queue_of("a.", "b."), CAPS)) == 1


@pytest.fixture(scope="module")
def batch_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("batches") / "sizes.txt"


@pytest.fixture(scope="module")
def client(batch_log: Path) -> Iterator[EngineClient]:
    # A ten-minute window: anything that waited for it would time these tests out.
    settings = Settings(
        backend="tests.fixture_batched_backend:BatchedToneBackend",
        voice_path=str(batch_log),
        batch_window_ms=600_000.0,
        job_timeout_s=60.0,
    )
    with EngineClient(settings) as engine:
        engine.wait_ready()
        yield engine


def expected_audio(text: str, seed: int, silence_s: float = 0.2) -> np.ndarray:
    backend = BatchedToneBackend(Settings())
    chunks = backend.synthesize(SpeechRequest(text, "en", seed=seed, sentence_silence_s=silence_s))
    return np.concatenate([c.audio for c in chunks])


def test_a_lone_request_is_answered_without_waiting_for_the_window(client: EngineClient) -> None:
    result = client.synthesize(SynthesisRequest("Just me.", seed=5), timeout=30)
    assert result.batch_size == 1
    np.testing.assert_allclose(result.audio, expected_audio("Just me.", 5), atol=1e-6)


def test_jobs_queued_together_share_a_batch_each_with_its_chunks_in_order_and_a_failure_stays_its_own(
    client: EngineClient, batch_log: Path
) -> None:
    blocker = client.submit(SynthesisRequest("sleep 1.", seed=1))
    deadline = time.monotonic() + 10
    while client.status().in_flight_job != blocker.job_id:
        assert time.monotonic() < deadline, "the first job never started"
        time.sleep(0.01)
    batch_log.write_text("")
    texts = {"One. Two. Three.": 11, "This will fail! Sorry.": 12, "Alpha. Beta.": 13}
    jobs = {text: client.submit(SynthesisRequest(text, seed=seed)) for text, seed in texts.items()}
    blocker.result(30)
    with pytest.raises(BackendRuntimeError, match="could not say"):
        jobs["This will fail! Sorry."].result(30)
    for text in ("One. Two. Three.", "Alpha. Beta."):
        job = jobs[text]
        chunks = list(job.chunks(timeout=30))
        result = job.result(0)
        assert [c.index for c in chunks] == list(range(len(chunks)))
        assert [c.chunk.text for c in chunks] == [s for s in text.split(" ")]
        np.testing.assert_array_equal(np.concatenate([c.chunk.audio for c in chunks]), result.audio)
        np.testing.assert_allclose(result.audio, expected_audio(text, texts[text]), atol=1e-6)
        assert result.batch_size == 3
    assert batch_log.read_text().split()[0] == "3"  # all three were on the device in one batch
    speed = client.status().speed  # what the panel shows
    assert speed is not None and speed.largest_batch == 3 and speed.first_audio_last_s > 0


def test_a_crash_in_a_batch_fails_the_job_in_flight_and_its_unfinished_batch_mates_run_again_alone() -> None:
    settings = Settings(backend="tests.fixture_batched_backend:BatchedToneBackend", job_timeout_s=60.0)
    with EngineClient(settings) as client:
        client.wait_ready()
        crash_in_a_batch(client)


def crash_in_a_batch(client: EngineClient) -> None:
    blocker = client.submit(SynthesisRequest("sleep 1.", seed=1))
    deadline = time.monotonic() + 10
    while client.status().in_flight_job != blocker.job_id:
        assert time.monotonic() < deadline, "the first job never started"
        time.sleep(0.01)
    first = client.submit(SynthesisRequest("First in line.", seed=21))
    poison = client.submit(SynthesisRequest("This one crash! the worker.", seed=22))
    innocent = client.submit(SynthesisRequest("Innocent bystander.", seed=23))
    blocker.result(30)
    assert first.result(120).batch_size == 3  # answered before its batch-mate crashed the worker
    with pytest.raises(WorkerCrashedError):
        poison.result(120)  # the job in flight when the worker died, as without batching
    survivor = innocent.result(120)  # run again alone on the next worker
    assert survivor.batch_size == 1
    np.testing.assert_allclose(survivor.audio, expected_audio("Innocent bystander.", 23), atol=1e-6)
    assert client.status().restarts == 1
