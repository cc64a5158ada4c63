"""Serve's request router with one addition: a control or status request can name the replica it is for.

Speech requests carry their voice (the prompt's content hash) as Serve's multiplexed model id, so the stock
power-of-two-choices router sends them to a replica that already holds that voice's profile and falls back to
the less loaded of two replicas (``serve.multiplexed``): nothing of our own. A model id ``replica:<id>`` (the
panel's Clean cache or Soft restart of one replica) goes to that replica only.
"""

from __future__ import annotations

from ray.serve._private.request_router.pow_2_router import PowerOfTwoChoicesRequestRouter
from ray.serve.request_router import PendingRequest, RunningReplica

REPLICA_PREFIX = "replica:"


def replica_key(replica_id: str) -> str:
    """The multiplexed model id that routes a request to one replica."""
    return f"{REPLICA_PREFIX}{replica_id}"


class VoiceRouter(PowerOfTwoChoicesRequestRouter):
    """Voice affinity and least-loaded fallback as Serve does it; ``replica:<id>`` requests to that replica."""

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        wanted = pending_request.metadata.multiplexed_model_id if pending_request is not None else ""
        if wanted.startswith(REPLICA_PREFIX):
            target = wanted[len(REPLICA_PREFIX) :]
            return [[r for r in candidate_replicas if r.replica_id.unique_id == target]]
        return await super().choose_replicas(candidate_replicas, pending_request)
