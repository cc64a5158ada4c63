"""The CUDA graph sets of the renderer's analysis and the scoring's encoders, as far as a CPU can see them: which
exist, that a CPU call is never graphed, and that Clean cache and unloading drop every set's graphs and pool (the
replays themselves: tests/test_judge_ecapa.py, tests/test_voice_gpu.py, tests/test_pulse_graphs.py on a GPU)."""

from __future__ import annotations

import torch

from voicelab.backends.base import GraphBucket
from voicelab.backends.shape_graphs import ShapeGraphs
from voicelab.engine.voicing import VoiceStage
from voicelab.judges.ecapa import GRAPH_STAGE

BUCKET = GraphBucket(GRAPH_STAGE, rows=2, length=56000, bytes=40 << 20, eager_ms=5.0, graph_ms=1.5, kept=True)


def test_a_call_on_the_cpu_is_never_graphed_however_often_its_shape_comes() -> None:
    graphs = ShapeGraphs("test", max_bytes=1 << 20)
    x = torch.arange(6.0).view(2, 3)
    for _ in range(3):
        assert graphs.replayed((2, 3), torch.neg, (x,), torch.Tensor.clone) is None
    assert graphs.reports() == ()


def test_a_cuda_stage_graphs_its_judge_unless_graphs_are_off_and_a_cpu_stage_has_none() -> None:
    assert VoiceStage("cuda", 2, "pulse").scorer.judge.graphs is not None  # made now, captured on the device later
    assert VoiceStage("cuda", 2, "world").scorer.judge.graphs is not None  # the scoring's, whatever the renderer
    off = VoiceStage("cuda", 2, "pulse", cuda_graphs=False)
    assert off.scorer.judge.graphs is None and off.graphs is None and off.cuda_graphs is False
    cpu = VoiceStage("cpu", 2, "pulse")
    assert cpu.scorer.judge.graphs is None and cpu.graph_buckets() == () and cpu.release_graphs() == 0


def test_clean_cache_and_unloading_drop_the_judges_graphs_with_the_renderers() -> None:
    stage = VoiceStage("cuda", 2, "pulse")
    judge_graphs = stage.scorer.judge.graphs
    assert judge_graphs is not None
    for _ in range(2):
        judge_graphs._reports.extend([BUCKET, BUCKET])  # what two captures leave
        judge_graphs._pool, judge_graphs._pool_bytes = object(), 2 * BUCKET.bytes
        assert stage.graph_buckets() == (BUCKET, BUCKET)
        assert stage.release_graphs() == 2 * BUCKET.bytes
        assert stage.graph_buckets() == () and judge_graphs._pool is None
    judge_graphs._reports.append(BUCKET)
    stage.unload()  # the graphs read the judge's weights: they go first
    assert stage.graph_buckets() == ()
