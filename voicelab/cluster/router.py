"""Serve's request router with one addition: a control or status request can name the replica it is for.

Speech requests carry their voice (the prompt's content hash) as Serve's multiplexed model id, so the stock
power-of-two-choices router sends them to a replica that already holds that voice's profile and falls back to
the less loaded of two replicas (``serve.multiplexed``). Serve learns which replica holds a model id from the
replica, through its controller, a moment after the first request; a voice's second request sent within that
moment would be placed at random, so the router also remembers where it sent each voice (a bounded LRU) and
tries that replica first when it has room. A model id ``replica:<id>`` (the panel's Clean cache or Soft restart
of one replica) goes to that replica only.
"""

from __future__ import annotations

from typing import Any

from ray.serve._private.request_router.pow_2_router import PowerOfTwoChoicesRequestRouter
from ray.serve.request_router import PendingRequest, ReplicaID, RunningReplica

from voicelab.lru import BoundedLRU

REPLICA_PREFIX = "replica:"
VOICES_REMEMBERED = 4096


def replica_key(replica_id: str) -> str:
    """The multiplexed model id that routes a request to one replica."""
    return f"{REPLICA_PREFIX}{replica_id}"


class VoiceRouter(PowerOfTwoChoicesRequestRouter):
    """Voice affinity and least-loaded fallback as Serve does it; ``replica:<id>`` requests to that replica."""

    def initialize_state(self, **kwargs: Any) -> None:
        super().initialize_state(**kwargs)
        self._sent: BoundedLRU[str] = BoundedLRU(VOICES_REMEMBERED)  # voice -> the replica id it went to last

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        wanted = pending_request.metadata.multiplexed_model_id if pending_request is not None else ""
        if wanted.startswith(REPLICA_PREFIX):
            target = wanted[len(REPLICA_PREFIX) :]
            return [[r for r in candidate_replicas if r.replica_id.unique_id == target]]
        ranks = await super().choose_replicas(candidate_replicas, pending_request)
        holder = self._sent.get(wanted) if wanted else None
        first = [r for r in candidate_replicas if r.replica_id.unique_id == holder]
        return [first, *ranks] if first else ranks

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any) -> None:
        voice = pending_request.metadata.multiplexed_model_id
        if voice and not voice.startswith(REPLICA_PREFIX):
            self._sent.put(voice, replica_id.unique_id)
