"""One engine replica: a Serve deployment that holds one VoiceLab engine (its worker process and hygiene as on
one host) and answers speech requests as a stream of the engine's own messages.

A speech request streams ``JobAccepted`` once its worker has the job (from then on a replica death fails it;
before, the ingress sends it elsewhere), then ``ChunkReady`` per chunk, then the ``SynthesisResult`` or an
``ErrorReply`` naming a ``voicelab.errors`` class. The voice (the prompt's content hash) is Serve's multiplexed
model id: loading it is a no-op here, but tells Serve's router which replica holds the profile, so that voice's
next requests come back. Status goes to the board once a second (``board``), not through requests.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import ray
from ray import serve

from voicelab.cluster.board import ReplicaReport, board_handle
from voicelab.engine.client import EngineClient
from voicelab.engine.jobs import Job
from voicelab.engine.messages import ChunkReady, ErrorReply, JobAccepted, SynthesisRequest, SynthesisResult
from voicelab.errors import VoiceLabError
from voicelab.settings import Settings
from voicelab.telemetry.nvml import NvmlSampler

log = logging.getLogger(__name__)

REPORT_INTERVAL_S = 1.0
VOICES_PER_REPLICA = 8  # Serve's multiplexed ids per replica: the engine's profile cache size by default
ReplicaEvent = JobAccepted | ChunkReady | SynthesisResult | ErrorReply


@dataclass(frozen=True)
class ControlCommand:
    """A panel button for one replica: "clean" (clear_profiles) or "restart" (force)."""

    kind: str
    clear_profiles: bool = False
    force: bool = False


def job_events(job: Job, timeout_s: float) -> Iterator[ReplicaEvent]:
    """The job as the messages the ingress reads: accepted, chunks, then its result or its error."""
    while not job.running() and not job.done():
        time.sleep(0.01)
    yield JobAccepted(job.job_id)
    try:
        yield from job.chunks(timeout=timeout_s)
        yield job.result(0)
    except VoiceLabError as exc:
        yield ErrorReply(job.job_id, type(exc).__name__, str(exc))


class EngineReplica:
    """The deployment's class (``deploy`` wraps it with ``serve.deployment``): one ``EngineClient``."""

    def __init__(self, settings: Settings, app_name: str) -> None:
        self.settings = settings
        self.engine = EngineClient(settings)
        self.replica_id = serve.get_replica_context().replica_id.unique_id
        self.node = ray.util.get_node_ip_address()
        self.gpus = tuple(str(g) for g in ray.get_gpu_ids())
        self._nvml = NvmlSampler(int(self.gpus[0])) if self.gpus else None
        self._board = board_handle(app_name)
        self._stopping = threading.Event()
        threading.Thread(target=self._report_loop, name="voicelab-replica-report", daemon=True).start()

    @serve.multiplexed(max_num_models_per_replica=VOICES_PER_REPLICA)
    async def hold_voice(self, voice: str) -> str:
        """Serve keeps this replica's voices: the engine's profile LRU holds the profile itself."""
        return voice

    async def synthesize(self, request: SynthesisRequest) -> AsyncIterator[ReplicaEvent]:
        voice = serve.get_multiplexed_model_id()
        if voice:
            await self.hold_voice(voice)
        try:
            job = self.engine.submit(request)
        except VoiceLabError as exc:
            yield ErrorReply(request.job_id, type(exc).__name__, str(exc))
            return
        events = job_events(job, self.settings.job_timeout_s + 60.0)
        while True:  # the engine's calls block: off the replica's event loop, one event at a time
            event = await asyncio.to_thread(next, events, None)
            if event is None:
                return
            yield event

    async def control(self, command: ControlCommand) -> object:
        """Clean cache or soft restart of this replica's engine (between its jobs, as on one host)."""
        if command.kind == "clean":
            return await asyncio.to_thread(self.engine.clean_cache, command.clear_profiles)
        if command.kind == "restart":
            return await asyncio.to_thread(self.engine.soft_restart, command.force)
        if command.kind == "snapshot":
            return await asyncio.to_thread(self.engine.memory_snapshot)
        raise ValueError(f"unknown control {command.kind!r}")

    def check_health(self) -> None:
        """Serve's health check: a replica whose engine stopped is replaced."""
        if self._stopping.is_set():
            raise RuntimeError("the replica's engine is stopping")

    def report(self) -> ReplicaReport:
        figures = self._nvml.sample() if self._nvml is not None else None
        vram = (figures.used, figures.total) if figures is not None else None
        engine = self.engine.status()
        return ReplicaReport(
            self.replica_id, os.getpid(), self.node, self.gpus, vram, engine, self.engine.queue_view(), time.time()
        )

    def _report_loop(self) -> None:
        while True:
            try:
                self._board.report.remote(self.report())
            except Exception:  # a report lost is the next second's; the loop must outlive any one failure
                log.exception("replica report failed")
            if self._stopping.wait(REPORT_INTERVAL_S):
                return

    def __del__(self) -> None:
        self._stopping.set()
        try:
            self._board.forget.remote(self.replica_id)
        except Exception:  # the cluster may be going down with this replica
            log.debug("could not take the replica off the board", exc_info=True)
        self.engine.close()
