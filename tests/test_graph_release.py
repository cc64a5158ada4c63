"""Clean cache and the OOM retry drop the backend's CUDA graphs: a live graph's private memory pool is beyond
``empty_cache``, so without this a Clean cache left gigabytes reserved and an out-of-memory retry in smaller pieces
ran out again (both seen on the H200). The automatic clean between jobs keeps them, or every such clean would
cost a recapture. On CPU with a backend that reports graph buckets; tests/test_engine_gpu.py checks the memory.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from tests.fixture_backends import ToneBackend
from voicelab.backends.base import AudioChunk, GraphBucket, MemoryGuard, SpeechRequest, run_plainly
from voicelab.backends.piper.graphs import VitsGraphs
from voicelab.engine.core import EngineCore
from voicelab.engine.messages import SynthesisRequest
from voicelab.settings import Settings

BUCKET = GraphBucket("decode", rows=4, length=512, bytes=300 << 20, eager_ms=9.0, graph_ms=2.0, kept=True)


class GraphedTone(ToneBackend):
    """Captures a bucket on use (as Piper's graphs do) and counts how often it is asked to release them."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.buckets: list[GraphBucket] = []
        self.released = 0
        self.fail_next_full = False

    def graph_buckets(self) -> tuple[GraphBucket, ...]:
        return tuple(self.buckets)

    def release_graphs(self) -> int:
        self.released += 1
        freed, self.buckets = sum(b.bytes for b in self.buckets), []
        return freed

    def synthesize(self, request: SpeechRequest, guard: MemoryGuard = run_plainly) -> Iterator[AudioChunk]:
        self.buckets = self.buckets or [BUCKET]

        def full() -> list[AudioChunk]:
            if self.fail_next_full:
                self.fail_next_full = False
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB.")
            return list(super(GraphedTone, self).synthesize(request))

        yield from guard(full, lambda: list(super(GraphedTone, self).synthesize(request)))


@pytest.fixture
def core() -> Iterator[EngineCore]:
    engine = EngineCore(Settings(backend="tests.test_graph_release:GraphedTone", device="cpu", auto_clean=False))
    try:
        yield engine
    finally:
        engine.close()


def test_clean_cache_releases_graph_pools_and_they_come_back_on_use(core: EngineCore) -> None:
    backend: GraphedTone = core.backend  # type: ignore[assignment]
    core.synthesize(SynthesisRequest("A first sentence.", seed=1))
    assert core.graph_buckets() == (BUCKET,)
    report = core.clean_cache(False)
    assert "CUDA graph pools (captured again on next use)" in report.cleared
    assert backend.released == 1 and core.graph_buckets() == ()
    core.synthesize(SynthesisRequest("A second sentence.", seed=2))
    assert core.graph_buckets() == (BUCKET,)


def test_the_automatic_clean_between_jobs_keeps_the_graphs(core: EngineCore) -> None:
    backend: GraphedTone = core.backend  # type: ignore[assignment]
    core.synthesize(SynthesisRequest("A sentence.", seed=1))
    report = core.clean_cache(False, release_graphs=False)
    assert not any("graph" in item for item in report.cleared)
    assert backend.released == 0 and core.graph_buckets() == (BUCKET,)


def test_an_out_of_memory_releases_the_graphs_before_the_retry_in_pieces(core: EngineCore) -> None:
    backend: GraphedTone = core.backend  # type: ignore[assignment]
    core.synthesize(SynthesisRequest("Warm.", seed=1))
    backend.fail_next_full = True
    result = core.synthesize(SynthesisRequest("This one runs out of memory once, then in pieces.", seed=3))
    assert result.duration_s > 0.5  # the tone speaks the whole text, in pieces
    assert backend.released == 1


def test_vits_graphs_release_forgets_every_bucket_and_its_pool() -> None:
    graphs = VitsGraphs(model=None)  # type: ignore[arg-type]
    graphs._reports.append(BUCKET)
    graphs._pool, graphs._pool_bytes = object(), BUCKET.bytes
    assert graphs.release() == BUCKET.bytes
    assert graphs.reports() == () and graphs._pool is None and graphs._pool_bytes == 0


def test_the_graph_pool_budget_is_kept_by_predicting_each_buckets_growth() -> None:
    graphs = VitsGraphs(model=None, max_bytes=2 << 30)  # type: ignore[arg-type]
    assert graphs.fits("decode", 16, 4096)  # nothing learnt yet: the first capture teaches the stage's growth
    graphs._pool_bytes = 1 << 30
    graphs._unit_bytes["decode"] = (256 << 20) / (4 * 1024)  # 256 MiB for 4 rows x 1024 frames
    assert graphs.fits("decode", 4, 2048)  # +512 MiB -> 1.5 GiB
    assert not graphs.fits("decode", 16, 4096)  # +4 GiB would pass 2 GiB
    assert graphs.fits("encode", 16, 512)  # the other stage has its own rate
    graphs._pool_bytes = 2 << 30
    assert not graphs.fits("encode", 1, 32)
