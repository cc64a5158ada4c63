"""Where every engine replica publishes its status once a second: one small Ray actor per application.

The panel, ``/health`` and ``/metrics`` read the board, never a replica, so a busy or dead replica cannot make
them wait (the one-host engine keeps its worker's figures from heartbeats for the same reason). A replica that
stopped reporting for ``STALE_S`` is gone; Serve's replacement reports under its own replica id.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import ray

from voicelab.engine.status import EngineStatus, QueueView

STALE_S = 3.0  # three missed reports
NAMESPACE = "serve"


@dataclass(frozen=True)
class ReplicaReport:
    """One replica's state as it last told it.

    replica_id: Serve's id of the replica (a replaced replica has a new one); pid: its process on its node.
    node: the node's IP address.
    gpus: the GPU ids Ray gave it (empty on a CPU replica). vram: (used, total) bytes of its GPU from NVML on its
    node, ``None`` without one. engine: its own engine's status (one worker). reported_at: unix seconds.
    """

    replica_id: str
    pid: int
    node: str
    gpus: tuple[str, ...]
    vram: tuple[int, int] | None
    engine: EngineStatus
    queue: QueueView
    reported_at: float


class ReplicaBoard:
    """The latest report of each replica; reports older than ``STALE_S`` are not returned."""

    def __init__(self) -> None:
        self._reports: dict[str, ReplicaReport] = {}

    def report(self, report: ReplicaReport) -> None:
        self._reports[report.replica_id] = report

    def forget(self, replica_id: str) -> None:
        self._reports.pop(replica_id, None)

    def reports(self) -> list[ReplicaReport]:
        now = time.time()
        self._reports = {k: r for k, r in self._reports.items() if now - r.reported_at < STALE_S}
        return sorted(self._reports.values(), key=lambda r: r.replica_id)


def board_name(app_name: str) -> str:
    return f"voicelab-board-{app_name}"


def board_handle(app_name: str) -> Any:
    """The application's board (a Ray actor handle), made by whoever asks first; detached, so it outlives the
    deploying driver."""
    actor: Any = ray.remote(num_cpus=0)(ReplicaBoard)
    return actor.options(
        name=board_name(app_name), namespace=NAMESPACE, get_if_exists=True, lifetime="detached"
    ).remote()
