"""Micro-batching: which queued jobs go to the device together, and how long the first may wait for company.

The window: when several callers are active, the oldest job may wait up to ``window_s`` (from when it was
submitted or the device became free, whichever is later) for compatible jobs to join it. It stops waiting as
soon as as many jobs are queued as the last batch had (everyone who was here is back), or the batch is full. A
caller alone (the last batch was one job) is never held at all, and no job is ever held longer than the
window: a lone user pays nothing for batching.

Compatible: the same languages (one voice per language) and equal values of the backend's
``batch_split_options``. One worker has one backend and one dtype, so those are shared by construction.
Bounded: at most ``max_jobs`` jobs, and the sum of each job's memory estimate (its text length times
``Capabilities.batch_bytes_per_char``) within ``memory_bytes``; the first job always goes, whatever its size.
Torch-free; the client calls it under its lock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from voicelab.backends.base import Capabilities
from voicelab.backends.scripts import languages_in
from voicelab.engine.messages import SynthesisRequest
from voicelab.settings import Settings


class Queued(Protocol):
    """A queued job as the batcher sees it (``engine.jobs.Job`` fits)."""

    @property
    def request(self) -> SynthesisRequest: ...

    @property
    def alone(self) -> bool: ...  # run in no batch (after a crash in one)


Q = TypeVar("Q", bound=Queued)


@dataclass(frozen=True)
class BatchLimits:
    """window_s: the longest a job waits for company (0: no batching). max_jobs: jobs per batch.
    memory_bytes: the batch's summed memory estimate (0: no memory bound)."""

    window_s: float = 0.010
    max_jobs: int = 16
    memory_bytes: int = 4 << 30


def limits_from(settings: Settings) -> BatchLimits:
    return BatchLimits(
        window_s=max(settings.batch_window_ms, 0.0) / 1000,
        max_jobs=max(settings.batch_max_jobs, 1),
        memory_bytes=int(settings.batch_memory_mib * 2**20),
    )


def batch_key(request: SynthesisRequest, capabilities: Capabilities) -> Hashable:
    """Jobs with equal keys can share a padded batch. A request the worker will refuse (text that is not a string,
    from a caller that skipped the service's validation) gets a key of its own, so it is refused alone."""
    if not isinstance(request.text, str):
        return ("unbatchable", request.job_id)
    if request.language != "auto":
        languages: tuple[str, ...] = (request.language,)
    else:
        spoken = capabilities.languages
        languages = tuple(lang for lang in languages_in(request.text) if lang in spoken) or spoken[:1]
    split = tuple(request.options.get(name) for name in capabilities.batch_split_options)
    return (languages, split)


def job_limit(capabilities: Capabilities | None) -> int:
    """Jobs a worker has in flight at most: one job or micro-batch (single flight), or the backend's
    ``concurrent_jobs`` side by side."""
    return capabilities.concurrent_jobs if capabilities is not None else 1


def has_room(capabilities: Capabilities | None, in_flight: int) -> bool:
    """Whether a worker may take more jobs now."""
    return in_flight < job_limit(capabilities)


def estimate_bytes(request: SynthesisRequest, capabilities: Capabilities) -> int:
    return len(request.text) * capabilities.batch_bytes_per_char if isinstance(request.text, str) else 0


class MicroBatcher:
    """Not thread-safe on its own: the client holds its lock around every call."""

    def __init__(self, limits: BatchLimits) -> None:
        self.limits = limits
        self.expected = 1  # jobs in the last batch: how many callers to wait for
        self.free_since = 0.0  # when the device last became free (monotonic)
        self.batches = 0
        self.batched_jobs = 0
        self.largest = 0

    def enabled(self, capabilities: Capabilities | None) -> bool:
        return capabilities is not None and capabilities.batching and self.limits.window_s > 0

    def device_free(self, now: float) -> None:
        self.free_since = now

    def hold_s(self, queue: deque[Q], capabilities: Capabilities | None, now: float) -> float:
        """How much longer the oldest job should wait for company; 0: send now."""
        if not queue or not self.enabled(capabilities) or self.expected <= 1 or queue[0].alone:
            return 0.0
        assert capabilities is not None
        ready = len(self._pick(queue, capabilities))
        if ready >= min(self.expected, self.limits.max_jobs) or ready < self._compatible(queue, capabilities):
            return 0.0  # everyone expected is here, or the memory bound already closed the batch
        start = max(queue[0].request.submitted_at, self.free_since)
        return min(self.limits.window_s, max(0.0, start + self.limits.window_s - now))

    def take(self, queue: deque[Q], capabilities: Capabilities | None, in_flight: int = 0) -> list[Q]:
        """Remove and return the next batch (the oldest job and the compatible ones after it, in order); for a
        backend running jobs side by side, no more than the places it has left beside ``in_flight``."""
        if not queue:
            return []
        if not self.enabled(capabilities):
            return [queue.popleft()]
        assert capabilities is not None
        limit = job_limit(capabilities)
        room = limit - in_flight if limit > 1 else None
        picked = self._pick(queue, capabilities)[: max(room, 1) if room is not None else None]
        chosen = [queue[i] for i in picked]
        for i in reversed(picked):
            del queue[i]
        self.expected = len(chosen)
        self.batches += 1
        self.batched_jobs += len(chosen)
        self.largest = max(self.largest, len(chosen))
        return chosen

    def _pick(self, queue: deque[Q], capabilities: Capabilities) -> list[int]:
        key = batch_key(queue[0].request, capabilities)
        picked, used = [0], estimate_bytes(queue[0].request, capabilities)
        for i in range(1 if not queue[0].alone else len(queue), len(queue)):
            if len(picked) >= self.limits.max_jobs:
                break
            request = queue[i].request
            if queue[i].alone or batch_key(request, capabilities) != key:
                continue
            need = estimate_bytes(request, capabilities)
            if self.limits.memory_bytes and used + need > self.limits.memory_bytes:
                break  # keep arrival order: a smaller job behind does not overtake this one
            picked.append(i)
            used += need
        return picked

    def _compatible(self, queue: deque[Q], capabilities: Capabilities) -> int:
        key = batch_key(queue[0].request, capabilities)
        return sum(1 for job in queue if batch_key(job.request, capabilities) == key)
