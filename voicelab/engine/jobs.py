"""A submitted job: a future for its result that also streams its audio chunks as they arrive."""

from __future__ import annotations

import queue
import secrets
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from voicelab.engine.messages import (
    ChunkReady,
    ControlRequest,
    JobProgress,
    SynthesisBatch,
    SynthesisRequest,
    SynthesisResult,
)
from voicelab.engine.status import RestartReport
from voicelab.errors import EngineBusyError, JobTimeoutError


def with_seed(request: SynthesisRequest) -> SynthesisRequest:
    """Fix a random seed at submission, so a job run again after a restart says exactly the same."""
    seed = request.seed if request.seed is not None else secrets.randbelow(2**31)
    return replace(request, seed=seed, submitted_at=time.monotonic())


def busy_error(waiting: int) -> EngineBusyError:
    """The sentence for a full queue (HTTP callers get it as a 429)."""
    return EngineBusyError(f"The engine is busy: {waiting} jobs are already waiting. Please try again in a moment.")


def timeout_error(limit_s: float) -> JobTimeoutError:
    return JobTimeoutError(
        f"Generation took longer than {limit_s:.0f} s and was stopped; the engine was restarted. Try shorter text."
    )


class Job(Future[SynthesisResult]):
    """``result()`` waits for the whole job; ``chunks()`` yields each piece of audio first, in order.

    A job that is run again (its worker was replaced mid-job by a forced restart) sends its chunks again from
    the start; the ones already delivered are skipped, which is exact because its seed was fixed at submission.
    """

    def __init__(self, request: SynthesisRequest) -> None:
        super().__init__()
        self.request = request
        self._chunks: queue.SimpleQueue[ChunkReady | JobProgress | None] = queue.SimpleQueue()
        self._delivered = 0
        self.alone = False  # run in no batch: it was in a batch whose worker crashed
        self.add_done_callback(lambda _: self._chunks.put(None))

    @property
    def job_id(self) -> str:
        return self.request.job_id

    def push(self, chunk: ChunkReady | JobProgress) -> None:
        """Called by the client as a chunk (skipping repeats after a rerun) or a progress note arrives."""
        if isinstance(chunk, JobProgress):
            self._chunks.put(chunk)
        elif chunk.index >= self._delivered:
            self._delivered = chunk.index + 1
            self._chunks.put(chunk)

    def chunks(self, timeout: float | None = None) -> Iterator[ChunkReady]:
        """Every chunk as it arrives; ends when the job does, raising its error if it failed.

        ``timeout`` bounds the wait for each next chunk (``JobTimeoutError`` past it).
        """
        for event in self.events(timeout):
            if isinstance(event, ChunkReady):
                yield event

    def events(self, timeout: float | None = None) -> Iterator[ChunkReady | JobProgress]:
        """As ``chunks``, with the job's progress notes (a voice being fitted) where they came between them.

        A progress note also restarts the ``timeout`` wait: a long fit that reports is not a silent engine.
        """
        while True:
            try:
                item = self._chunks.get(timeout=timeout)
            except queue.Empty as exc:
                raise JobTimeoutError("The engine did not answer in time; please try again.") from exc
            if item is None:
                self.result(0)  # raises the job's error, if any
                return
            yield item


def batch_message(jobs: Sequence[Job]) -> SynthesisRequest | SynthesisBatch:
    """What a worker is sent for the jobs it takes at once: a lone job as itself, several as one batch."""
    if len(jobs) == 1:
        return jobs[0].request
    return SynthesisBatch(tuple(job.request for job in jobs))


def after_crash(accepted: Sequence[Job]) -> tuple[list[Job], list[Job]]:
    """(fail, run again) of the jobs a dead worker had accepted and not answered, in batch order: the first
    fails, as the one job in flight would without batching; its batch-mates run again each alone (a job that
    crashes a worker alone fails). Jobs the worker never had are not here: they simply run elsewhere."""
    for job in accepted[1:]:
        job.alone = True
    return list(accepted[:1]), list(accepted[1:])


@dataclass
class ControlCall:
    """A control request queued for the worker (it runs between jobs) and the future its caller waits on."""

    request: ControlRequest
    future: Future[Any]


def restart_reason(backend: str | None) -> str:
    """What a Soft restart's report says it was for: a plain restart, or the voice engine switch to ``backend``."""
    return f"voice engine {backend} chosen" if backend else "soft restart requested"


@dataclass
class RestartCall:
    """A soft restart asked for; ``force`` requeues the job in flight instead of waiting for it; ``backend``: the
    new worker loads this backend instead (the voice engine switch), ``None``: the one it had."""

    force: bool
    reason: str
    future: Future[RestartReport]
    backend: str | None = None
