"""``bench cosyvoice``'s workload and goal lines on CPU (the run itself needs the H200 and the optional install)."""

from __future__ import annotations

from pathlib import Path

from voicelab.bench.cosyvoice import MIB, goal_lines, short_jobs, workload


def test_workload_spans_the_issue_range_with_new_prompts_and_mandarin(tmp_path: Path) -> None:
    jobs = workload(200, 200, tmp_path)
    lengths = [len(job.text) for job in jobs]
    assert min(lengths) >= 5 and max(lengths) <= 200 and len(set(lengths)) > 60
    assert sum(any("\u4e00" <= ch <= "\u9fff" for ch in job.text) for job in jobs) == 50
    assert len({job.prompt for job in jobs}) >= 150  # three in four a voice no cache has seen
    assert all(Path(job.prompt).is_file() and job.transcript for job in jobs)
    assert workload(200, 200, tmp_path) == jobs  # both sides get the same requests


def _side(allocated: list[int], rss: list[int], reserved: int) -> dict:
    samples = [
        {"window": i, "allocated": a, "reserved": reserved, "inactive_split": 0, "nvml_used": 0, "rss": r}
        for i, (a, r) in enumerate(zip(allocated, rss, strict=True))
    ]
    rows = [(1.0, 0.5, 2.0)] * 30
    return {"samples": samples, "rows": rows, "fresh_nvml": 0, "restarted_nvml": 10 * MIB, "probe_peak": 100}


def test_goal_lines_fail_on_growth_and_pass_when_flat() -> None:
    flat = _side([5 * MIB] * 4, [900 * MIB] * 4, 10)
    leaking = _side([5 * MIB, 5 * MIB, 9 * MIB, 20 * MIB], [900 * MIB, 900 * MIB, 1000 * MIB, 1200 * MIB], 10)
    lines = goal_lines(flat, leaking, {"probe_peak": 60})
    assert all(line.endswith("pass") for line in lines), lines
    bad = goal_lines(leaking, flat, {"probe_peak": 90})
    failed = {line.split(":")[0] for line in bad if line.endswith("FAIL")}
    assert failed == {
        "allocated growth after warm-up, MiB",
        "host RSS growth per zero-shot call, MiB",
        "probe dtype peak / float32 peak",
    }


def test_throughput_requests_are_single_sentences_on_the_base_prompts() -> None:
    jobs = short_jobs()
    assert len(jobs) == 8 and all(20 < len(job.text) < 120 for job in jobs)
    assert len({job.prompt for job in jobs}) == 4
