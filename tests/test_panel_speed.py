"""The panel's speed line: time to first audio and batch sizes of recent jobs, CUDA graph buckets and memory."""

from __future__ import annotations

from voicelab.backends.base import GraphBucket
from voicelab.engine.status import EngineStatus, JobSpeed
from voicelab.ui.panel import speed_line


def status_with(speed: JobSpeed | None, graphs: tuple[GraphBucket, ...]) -> EngineStatus:
    return EngineStatus(
        ready=True,
        queue_length=0,
        in_flight_job=None,
        worker_pid=1,
        restarts=0,
        completed=3,
        failed=0,
        worker=None,
        last_stats=None,
        last_heartbeat_age_s=None,
        load_error=None,
        leak_warning=None,
        speed=speed,
        graphs=graphs,
    )


def test_the_speed_line_shows_first_audio_batches_and_the_graph_buckets_kept_with_their_memory() -> None:
    graphs = (
        GraphBucket("encode", 1, 32, 8 << 20, eager_ms=6.0, graph_ms=1.0, kept=True),
        GraphBucket("decode", 8, 1024, 120 << 20, eager_ms=4.0, graph_ms=5.0, kept=False),
    )
    line = speed_line(status_with(JobSpeed(40, 0.031, 0.045, 3.5, 8), graphs))
    assert "time to first audio 31 ms median of 40 (last 45 ms)" in line
    assert "batch 3.5 mean, 8 largest" in line
    assert "CUDA graphs 1/2 kept (encode 1x32)" in line
    assert "128" in line and "MiB" in line  # the two captures' memory together


def test_without_jobs_or_graphs_the_speed_line_is_empty() -> None:
    assert speed_line(status_with(None, ())) == ""


def test_a_stage_with_many_graphs_is_counted_and_the_llm_steps_memory_is_in_the_total() -> None:
    """CosyVoice with 16 decode slots captures 25 step graphs (5 row counts x 5 lengths) beside the flow's buckets."""
    steps = tuple(
        GraphBucket("llm step", rows, length, (80 << 20) if rows == length == 1 else 0, 20.0, 2.5, kept=True)
        for rows in (1, 2, 4, 8, 16)
        for length in (1, 2, 3, 4, 5)
    )
    flow = (GraphBucket("flow estimator", 2, 256, 40 << 20, 7.0, 30.0, kept=False),)
    line = speed_line(status_with(None, steps + flow))
    assert "CUDA graphs 25/26 kept (llm step 25 shapes) · 120" in line and "MiB" in line
