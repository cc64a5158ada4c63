"""Routing decisions on their own (no processes): who gets a job, and the server's mirror of each profile cache."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from voicelab.backends.base import Capabilities
from voicelab.engine.jobs import Job, batch_message
from voicelab.engine.messages import SynthesisBatch, SynthesisRequest
from voicelab.engine.microbatch import BatchLimits, MicroBatcher
from voicelab.engine.pool import JobPool
from voicelab.engine.routing import ProfileMirror, WorkerLoad, choose_worker
from voicelab.settings import Settings
from voicelab.voice.prompt import PromptAudio


def _load(index: int, **changes: object) -> WorkerLoad:
    base = WorkerLoad(index, healthy=True, busy=0, capacity=1, holds_profile=False, last_dispatch=0.0)
    return replace(base, **changes)  # type: ignore[arg-type]


def test_a_restarting_or_busy_worker_gets_nothing() -> None:
    assert choose_worker([_load(0, healthy=False), _load(1, busy=1)]) is None
    assert choose_worker([_load(0, healthy=False), _load(1)]) == 1


def test_the_worker_holding_the_profile_wins_over_the_one_idle_longer() -> None:
    loads = [_load(0, last_dispatch=1.0), _load(1, last_dispatch=5.0, holds_profile=True)]
    assert choose_worker(loads) == 1
    assert choose_worker([replace(loads[0], holds_profile=True), loads[1]]) == 0  # both hold it: idle longer


def test_a_busy_profile_holder_is_not_waited_for() -> None:
    assert choose_worker([_load(0, busy=1, holds_profile=True), _load(1, last_dispatch=9.0)]) == 1


def test_the_least_loaded_wins_when_workers_take_several_jobs() -> None:
    loads = [_load(0, busy=3, capacity=4), _load(1, busy=1, capacity=4, last_dispatch=9.0)]
    assert choose_worker(loads) == 1


def test_the_mirror_evicts_like_the_workers_lru() -> None:
    mirror = ProfileMirror(capacity=2)
    for sha in ("a", "b", "a", "c"):
        mirror.touch(sha)
    assert [mirror.holds(sha) for sha in ("a", "b", "c", None)] == [True, False, True, False]
    mirror.clear()
    assert not mirror.holds("a")


def _prompt(sha: str) -> PromptAudio:
    return PromptAudio(np.zeros(16000, np.float32), 16000, sha256=sha)


def _pool_where_worker_1_holds(sha: str) -> JobPool:
    """Two free workers; worker 1 holds the profile of voice ``sha``."""
    pool = JobPool(Settings(queue_size=8))

    def loads(request: SynthesisRequest) -> Sequence[WorkerLoad]:
        held = request.prompt is not None and request.prompt.sha256 == sha
        return [_load(i, holds_profile=held and i == 1) for i in (0, 1)]

    pool.loads = loads
    return pool


def test_a_free_worker_leaves_a_job_for_the_free_worker_holding_its_profile() -> None:
    pool = _pool_where_worker_1_holds("voice-a")
    cloned, plain = Job(SynthesisRequest("a", prompt=_prompt("voice-a"))), Job(SynthesisRequest("b"))
    pool.submit(cloned)
    pool.submit(plain)
    with pool.lock:
        assert pool.take_for(0) == [plain]
        assert pool.take_for(1) == [cloned]


def test_a_micro_batch_takes_only_the_jobs_routed_to_its_worker_in_queue_order() -> None:
    """Batching meets routing: worker 1 holds voice-a, so worker 0's batch is the plain jobs and worker 1's the
    cloned ones, each in the order they were queued (the micro-batcher as the slot's ``take``)."""
    pool = _pool_where_worker_1_holds("voice-a")
    caps = Capabilities(languages=("en",), sample_rate=16000, batching=True, batch_bytes_per_char=1)
    batcher = MicroBatcher(BatchLimits(window_s=0.01))
    jobs = [Job(SynthesisRequest(f"t{i}.", prompt=_prompt("voice-a") if i % 2 else None)) for i in range(5)]
    for job in jobs:
        pool.submit(job)
    with pool.lock:
        assert list(pool.routed_for(1)) == [jobs[1], jobs[3]]
        assert pool.take_for(0, lambda routed: batcher.take(routed, caps)) == [jobs[0], jobs[2], jobs[4]]
        assert pool.take_for(1, lambda routed: batcher.take(routed, caps)) == [jobs[1], jobs[3]]
        assert not pool.jobs
    message = batch_message([jobs[1], jobs[3]])
    assert isinstance(message, SynthesisBatch) and [r.text for r in message.requests] == ["t1.", "t3."]
    assert batch_message([jobs[0]]) is jobs[0].request  # a lone job goes as itself
