"""Which worker runs a job when there are several devices: pure decisions, no processes, no locks.

A job goes to a healthy worker with room (ready, not restarting, fewer jobs in flight than it takes). Among
those, the one that already holds the request's speaker profile wins (building a profile costs an encoder pass
and the matcher's search, far more than the job), then the least loaded, then the one idle longest, so a lone
user's jobs spread over the devices instead of heating one. A busy worker that holds the profile is not waited
for: the takes of one request, which share a prompt, run on several devices at the same time.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerLoad:
    """What routing knows of one worker at the moment a job is placed."""

    index: int
    healthy: bool  # ready and not restarting (a restarting worker never gets work)
    busy: int  # jobs in flight (sent, not finished)
    capacity: int  # jobs it may hold at once (1: single flight)
    holds_profile: bool  # it has the request's speaker profile in its cache
    last_dispatch: float  # monotonic time of its latest job (0: never)


def choose_worker(loads: Sequence[WorkerLoad]) -> int | None:
    """The index of the worker that should run the job now, or None when no healthy worker has room."""
    free = [w for w in loads if w.healthy and w.busy < w.capacity]
    if not free:
        return None
    best = min(free, key=lambda w: (not w.holds_profile, w.busy / w.capacity, w.last_dispatch, w.index))
    return best.index


class ProfileMirror:
    """The speaker profiles one worker holds, mirrored on the server side from the jobs sent to it.

    The worker's cache is an LRU keyed by the prompt's content hash with the same capacity, touched once per
    job with a prompt, so replaying the same touches here gives the same contents without asking the worker.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = max(capacity, 0)
        self._held: OrderedDict[str, None] = OrderedDict()

    def touch(self, sha256: str) -> None:
        self._held[sha256] = None
        self._held.move_to_end(sha256)
        while len(self._held) > self.capacity:
            self._held.popitem(last=False)

    def holds(self, sha256: str | None) -> bool:
        return sha256 is not None and sha256 in self._held

    def clear(self) -> None:
        self._held.clear()
