"""``bench cosyvoice``'s workload and goal lines on CPU (the run itself needs the H200 and the optional install)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from voicelab.bench.cosyvoice import MIB, goal_lines, short_jobs, summary, workload
from voicelab.bench.cosyvoice_sides import stream_jobs


def test_workload_spans_the_goal_range_with_new_prompts_and_mandarin(tmp_path: Path) -> None:
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
        "float16 peak / float32 peak",
    }


def test_the_peak_ratio_reads_the_reduced_side_over_float32_whichever_side_ran_which() -> None:
    """``--dtype bfloat16 --probe-dtype float32``: the run itself is the reduced side, the probe the float32 one."""
    side = _side([5 * MIB] * 4, [900 * MIB] * 4, 10)

    def peak_line(own: int, probed: int, dtypes: tuple[str, str]) -> str:
        lines = goal_lines({**side, "probe_peak": own}, None, {"probe_peak": probed}, dtypes)
        return next(line for line in lines if "peak / float32 peak" in line)

    assert peak_line(60, 100, ("bfloat16", "float32")) == "bfloat16 peak / float32 peak: 0.600 (goal <= 0.65) pass"
    assert peak_line(100, 60, ("float32", "bfloat16")) == "bfloat16 peak / float32 peak: 0.600 (goal <= 0.65) pass"
    assert peak_line(100, 90, ("float32", "float16")).endswith("0.900 (goal <= 0.65) FAIL")
    assert peak_line(60, 100, ("bfloat16", "float16")) == "bfloat16 peak / float32 peak: n/a (goal <= 0.65)"


def test_a_side_with_one_memory_window_reads_n_a_where_it_cannot_tell_growth() -> None:
    """``--upstream-requests 4``: upstream's side has only the sample taken after loading. Every goal line still
    prints; the growth lines say n/a instead of a traceback after all the figures."""
    ours = _side([5 * MIB] * 4, [900 * MIB] * 4, 10)
    short = _side([5 * MIB], [900 * MIB], 12)
    lines = {line.split(":")[0]: line for line in goal_lines(ours, short, None)}
    assert lines["upstream host RSS growth per zero-shot call, MiB"].endswith(": n/a (goal (reference))")
    assert lines["max reserved, voicelab / upstream"].endswith("pass")
    assert lines["host RSS growth per zero-shot call, MiB"].endswith("pass")
    alone = {line.split(":")[0]: line for line in goal_lines(_side([5 * MIB] * 2, [900 * MIB] * 2, 10), None, None)}
    assert alone["allocated growth after warm-up, MiB"].endswith(": n/a (goal <= 1)")
    assert alone["host RSS growth per zero-shot call, MiB"].endswith(": n/a (goal <= 1)")
    assert alone["inactive split after loading, MiB"].endswith("pass")


def test_throughput_requests_are_single_sentences_on_the_base_prompts() -> None:
    jobs = short_jobs()
    assert len(jobs) == 8 and all(20 < len(job.text) < 120 for job in jobs)
    assert len({job.prompt for job in jobs}) == 4


def test_throughput_is_judged_at_8_and_16_clients_against_upstreams_largest_count_when_it_ran_fewer() -> None:
    ours = _side([5 * MIB] * 4, [900 * MIB] * 4, 10)
    upstream = _side([5 * MIB] * 4, [900 * MIB] * 4, 10)
    ours["throughput"] = [
        {"clients": c, "requests_per_s": r, "audio_s_per_s": 10 * r} for c, r in ((1, 0.5), (8, 1.0), (16, 1.1))
    ]
    upstream["throughput"] = [{"clients": c, "requests_per_s": r} for c, r in ((1, 0.2), (8, 0.2))]
    lines = {line.split(":")[0]: line for line in goal_lines(ours, upstream, None)}
    assert lines["throughput at 8 clients, voicelab / upstream"].endswith("5.000 (goal >= 4) pass")
    assert lines["throughput at 16 clients, voicelab / upstream"].endswith("5.500 (goal >= 25) FAIL")
    assert lines["aggregate RTF at 16 clients"].endswith("0.091 (goal <= 0.02) FAIL")


def test_streamed_requests_have_the_named_length_half_in_the_cached_voice_and_rtf_counts_long_ones_apart(
    tmp_path: Path,
) -> None:
    soak = workload(8, 200, tmp_path)
    chosen = stream_jobs(soak, 200)
    jobs = [job for job, _ in chosen]
    assert len(jobs) == 8 and all(190 <= len(job.text) <= 200 for job in jobs) and len({j.text for j in jobs}) == 8
    cached = {job.prompt for job, is_cached in chosen if is_cached}
    new = [job.prompt for job, is_cached in chosen if not is_cached]
    assert cached == {soak[0].prompt} and len(set(new)) == 4 and soak[0].prompt not in new
    ours = _side([5 * MIB] * 4, [900 * MIB] * 4, 10)
    ours["streamed"] = [(2.0, 0.12, 9.0, 1.0), (2.0, 0.14, 9.0, 1.0), (3.0, 0.24, 9.0, 0.0)]
    lines = {line.split(":")[0]: line for line in goal_lines(ours, None, None)}
    assert lines["streamed first audio p50, cached voice, s"].endswith("0.130 (goal <= 0.15) pass")
    assert lines["streamed first audio p50, new voice, s"].endswith("0.240 (goal <= 0.25) pass")
    ours["streamed"][1] = (2.0, 0.5, 9.0, 1.0)
    lines = {line.split(":")[0]: line for line in goal_lines(ours, None, None)}
    assert lines["streamed first audio p50, cached voice, s"].endswith("(goal <= 0.15) FAIL")
    figures = summary([(1.0, 0.2, 2.0), (3.0, 0.2, 10.0), (2.0, 0.2, 10.0)])
    assert figures["rtf_8s_plus"] == 0.25 and figures["requests_8s_plus"] == 2


def test_first_audio_timeline_reads_each_stage_once_and_counts_the_tokens_before_the_flow() -> None:
    from tools.cosyvoice_first_audio import timeline

    marks = [("token", 0.022), ("token", 0.025), ("token", 0.028), ("flow+", 0.030), ("token", 0.031)]
    marks += [("flow-", 0.160), ("vocoder+", 0.161), ("vocoder-", 0.190), ("flow+", 0.300), ("flow-", 0.400)]
    line = timeline(marks, 0.0, 0.192)
    assert line.tokens_by_flow == 3 and round(line.first_token_ms) == 22 and round(line.token_gap_ms) == 3
    assert [round(v) for v in (*line.flow_ms, *line.vocoder_ms, line.first_audio_ms)] == [30, 160, 161, 190, 192]
    assert line.line().startswith("first token 22 ms, 3 tokens by the first flow call")


def test_request_profile_reads_a_whole_requests_stages_and_counts_syncs_by_line() -> None:
    import warnings

    from tools.cosyvoice_request_profile import stages, sync_sources
    from voicelab.bench.cosyvoice_anchor import anchor_voice
    from voicelab.bench.soak import base_prompts

    marks = [("token", 1.040), *(("token", 1.040 + 0.0025 * i) for i in range(1, 253)), ("flow+", 1.700)]
    marks += [("flow encoder+", 1.701), ("flow encoder-", 1.712), ("flow decoder+", 1.713), ("flow decoder-", 1.879)]
    marks += [("flow-", 1.880), ("vocoder+", 1.881), ("vocoder-", 1.905)]
    line = stages(marks, 1.0, 1.030, 1.906, 10.08)
    assert line.tokens == 253 and round(line.features_ms) == 30 and round(line.first_token_ms) == 40
    assert [round(v) for v in (*line.flow_ms, *line.vocoder_ms, line.total_ms)] == [700, 880, 881, 905, 906]
    assert round(line.rtf, 3) == 0.090 and "(2.50 ms a token)" in line.line()
    assert "flow 700-880 (encoder 11, decoder 166)" in line.line()
    caught = [warnings.WarningMessage("sync", UserWarning, "/x/sampling.py", n, None) for n in (86, 86, 89)]
    assert sync_sources(caught) == {"sampling.py:86": 2, "sampling.py:89": 1}
    prompts = base_prompts()
    (first, rate, text), (again, _, _) = anchor_voice(0, prompts), anchor_voice(4, prompts)
    assert text and rate == 16000 and abs(first.size - again.size - 0.04 * 16000) <= 1  # the same clip, cut later


def test_request_profile_times_a_steps_sampling_alone_and_draws_each_rows_token() -> None:
    from collections.abc import Sequence

    import torch

    from tools.cosyvoice_request_profile import sampling_ms
    from voicelab.backends.cosyvoice.sampling import RasParams, Row, TokenRules

    drawn: list[list[int]] = []

    class Recorded(TokenRules):
        def sample_rows(self, logp: torch.Tensor, rows: Sequence[Row]) -> list[int]:
            drawn.append(super().sample_rows(logp, rows))
            return drawn[-1]

    rules = Recorded(RasParams(), frozenset({6561}), 6561, None)
    ms = sampling_ms(rules, 6564, 4, torch.zeros(1), repeats=5)
    assert 0 < ms < 1000
    assert len(drawn) == 8 and all(len(tokens) == 4 and all(0 <= t < 6564 for t in tokens) for tokens in drawn)
    assert len({tuple(tokens) for tokens in drawn}) > 1  # each call draws anew from the rows' generators


def test_host_memory_phases_repeat_one_request_then_vary_the_text_then_the_voice(tmp_path: Path) -> None:
    from tools.cosyvoice_host_memory import phases

    jobs = workload(60, 200, tmp_path)
    chosen = phases(jobs, 12)
    same, texts, voices = chosen.values()
    assert same == [jobs[0]] * 12
    assert {job.prompt for job in texts} == {jobs[0].prompt} and len({job.text for job in texts}) > 8
    assert len(voices) == 12 and jobs[0].prompt not in {job.prompt for job in voices}
    assert len({job.prompt for job in voices}) == 12
    later = phases(jobs, 12, ("texts",), warmup=3)["new texts, one voice"]  # ``--warmup 3``: the texts from the 4th
    assert [job.text for job in later] == [job.text for job in jobs[3:15]]


def test_stream_order_counts_only_the_cached_voice_and_runs_both_paths_and_orders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``tools.cosyvoice_stream_order`` over the CPU test double of upstream: each path and order gets its counted
    cached-voice streams (a new voice before each in the second order, never the cached one), and both the engine
    in this process and the spawned worker answer."""
    from tools.cosyvoice_stream_order import ORDERS, main, streams

    jobs = workload(16, 200, tmp_path)
    interleaved = streams(jobs, 3, 200, after_new_voice=True)
    assert [counted for _, counted in interleaved] == [False, True] * 3
    assert all(job.prompt == jobs[0].prompt for job, counted in interleaved if counted)
    assert len({job.prompt for job, counted in interleaved if not counted} - {jobs[0].prompt}) == 3
    assert all(len(job.text) == 200 for job, _ in interleaved)
    assert [counted for _, counted in streams(jobs, 3, 200, after_new_voice=False)] == [True] * 3
    model_dir = tmp_path / "cosyvoice2"
    model_dir.mkdir()
    (model_dir / "cosyvoice2.yaml").write_text("# a test double stands in for upstream\n")
    # 50-character texts, not the bench's 200: the test double speaks 2 tokens (80 ms) a character, and every answer's
    # audio is scored against its prompt, so shorter texts cost a quarter of the scoring; what is checked below,
    # a line per path and order, is the same at any length (the 200-character cut is checked above).
    options = ["--backend", "tests.fixture_cosyvoice_upstream:create", "--device", "cpu", "--requests", "2"]
    options += ["--chars", "50"]
    assert main(["--model-dir", str(model_dir), *options, "--backend-options", "decode_slots=4"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "first audio" in line]
    assert [line.split(":")[0] for line in lines] == [f"{path}, {order}" for path in ("inproc", "worker")
                                                      for order in ORDERS]  # fmt: skip
    assert all(line.count(" s; p50 ") == 1 for line in lines)


def test_host_memory_bench_runs_only_the_phases_asked_with_pooled_llm_threads_and_says_what_grew(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``tools.cosyvoice_host_memory`` over the CPU test double, ``--llm-threads pooled --phases texts,prompts``: the
    runtime's ``llm_job`` runs on the pool, the phases asked run alone and in order, each printing its RSS line,
    its mappings' growth, glibc's in-use bytes and the thread count; an unknown phase is refused with the names to
    choose from. (The phases' default order is ``test_host_memory_phases_repeat_one_request_then_vary_the_text_then_
    the_voice``'s.)"""
    from tools.cosyvoice_host_memory import main

    model_dir = tmp_path / "cosyvoice2"
    model_dir.mkdir()
    (model_dir / "cosyvoice2.yaml").write_text("# a test double stands in for upstream\n")
    options = ["--backend", "tests.fixture_cosyvoice_upstream:create", "--device", "cpu", "--phase", "2"]
    options += ["--warmup", "2"]  # the bench's ten warm-up requests judge memory; here only the phases' lines are read
    args = ["--model-dir", str(model_dir), *options, "--llm-threads", "pooled", "--phases", "texts,prompts"]
    assert main([*args, "--no-scores"]) == 0
    out = capsys.readouterr().out
    lines = [line.split(":")[0] for line in out.splitlines() if "MiB per call" in line]
    assert lines == ["new texts, one voice", "new prompts"]
    assert "   glibc in use: " in out and "   threads: " in out
    with pytest.raises(SystemExit):
        main(["--model-dir", str(model_dir), *options, "--phases", "prompts,everything"])
    assert "unknown phase 'everything'; choose from same, texts, prompts" in capsys.readouterr().err


def test_stream_order_trace_prints_each_requests_stages_once(tmp_path: Path) -> None:
    """``--trace``'s backend: one line per streamed request, at its first vocoder call, with its stages in order
    (inputs, run, first token, flow, vocoder, first audio), from the runtime's own calls."""
    from tests.fixture_cosyvoice_upstream import create
    from tools.cosyvoice_stream_order import trace_backend
    from voicelab.backends.base import SpeechRequest
    from voicelab.settings import Settings

    lines: list[str] = []
    (tmp_path / "cosyvoice2.yaml").write_text("# a test double stands in for upstream\n")
    settings = Settings(device="cpu", cosyvoice_dir=str(tmp_path), backend_options="decode_slots=1")
    backend = trace_backend(create(settings), lambda: None, lines.append)
    backend.load("cpu", "float32")
    for seed in range(2):
        text = "A first sentence that is long enough for more than one chunk of speech tokens to stream out."
        request = SpeechRequest(text=text, language="en", seed=seed, options={"stream": 1.0})
        assert sum(len(chunk.audio) for chunk in backend.synthesize(request)) > 0
    assert len(lines) == 2, lines
    for line in lines:
        inputs, run = re.match(r"trace: inputs at (\d+) ms, run at (\d+) ms, first token ", line).groups()  # type: ignore[union-attr]
        assert int(inputs) <= int(run) and "tokens by the first flow call" in line and "first audio" in line, line


def test_the_anchor_phase_sizes_its_texts_to_8_5_s_and_gives_every_request_a_voice_new_to_the_cache() -> None:
    """NVIDIA's shape: 26 Mandarin requests of one length at 1 and 4 clients, each in a voice no request used
    before; the probes fit seconds = a + b * characters, so the replies come out at the anchor's 8.5 s."""
    from voicelab.bench.cosyvoice_anchor import anchor_line, anchor_texts
    from voicelab.bench.cosyvoice_sides import Job, anchor_phase

    prompts: list[str] = []

    def call(job: Job) -> float:  # a model that speaks 1 s of silence and then 0.1 s per character
        prompts.append(job.prompt)
        assert Path(job.prompt).is_file() and job.transcript
        return 1.0 + 0.1 * len(job.text)

    anchor = anchor_phase(call, 26, [1, 4])
    assert anchor is not None and anchor["chars"] == 75
    assert len(prompts) == 2 + 2 * 26 == len(set(prompts))  # every voice new to the cache
    rows = anchor["throughput"]
    assert [(row["clients"], row["requests"]) for row in rows] == [(1, 26), (4, 26)]
    assert all(abs(row["audio_s_per_s"] * row["wall_s"] / 26 - 8.5) < 1e-6 for row in rows)
    texts = anchor_texts(26, 75)
    assert len(set(texts)) == 26 and all(len(t) == 75 for t in texts)
    assert all(sum("\u4e00" <= ch <= "\u9fff" for ch in t) > 60 for t in texts)
    line = anchor_line(anchor)
    assert line.startswith("RTF at concurrency 1 / 4: ")
    assert "(NVIDIA Triton+TRT-LLM on an L20: 0.089 / 0.060)" in line and "75 characters, 8.5 s of audio each" in line
    ours = _side([5 * MIB] * 4, [900 * MIB] * 4, 10)
    ours["anchor"] = {"chars": 75, "throughput": [{**rows[0], "audio_s_per_s": 40.0, "p50_s": 0.3}]}
    lines = {line.split(":")[0]: line for line in goal_lines(ours, None, None)}
    assert lines["RTF of one ~8.5 s request alone"].endswith("0.025 (goal <= 0.05) pass")
    assert lines["p50 latency of one ~8.5 s request alone, s"].endswith("0.300 (goal <= 0.4) pass")


def test_two_probes_that_do_not_grow_with_the_text_keep_the_longer_length() -> None:
    from voicelab.bench.cosyvoice_anchor import LONGEST_CHARS, anchor_texts, sized_chars

    assert sized_chars([(20, 3.0), (60, 3.0)]) == 60
    assert sized_chars([(20, 1.0), (60, 2.0)]) == LONGEST_CHARS  # 320 asked: held to the looped corpus
    assert [len(t) for t in anchor_texts(3, LONGEST_CHARS)] == [LONGEST_CHARS] * 3


def test_a_cosyvoice3_run_is_judged_by_cosyvoice3s_goals() -> None:
    """CosyVoice3's goals are RTF <= 0.08 and first audio <= 0.2 s; the same figures fail CosyVoice2's."""
    ours = _side([5 * MIB] * 4, [900 * MIB] * 4, 10)
    ours["streamed"] = [(2.0, 0.18, 9.0, 1.0), (2.0, 0.19, 9.0, 0.0)]
    ours["anchor"] = {"throughput": [{"clients": 1, "requests": 26, "audio_s_per_s": 1 / 0.0502, "p50_s": 0.437}]}
    ours["throughput"] = [{"clients": 16, "requests_per_s": 6.6, "audio_s_per_s": 1 / 0.0219}]
    v3 = {line.split(":")[0]: line for line in goal_lines(ours, None, None, version=3)}
    assert v3["RTF of one ~8.5 s request alone"].endswith("0.050 (goal <= 0.08) pass")
    assert v3["streamed first audio p50, cached voice, s"].endswith("0.180 (goal <= 0.2) pass")
    assert "p50 latency of one ~8.5 s request alone, s" not in v3 and "aggregate RTF at 16 clients" not in v3
    v2 = {line.split(":")[0]: line for line in goal_lines(ours, None, None)}
    assert v2["RTF of one ~8.5 s request alone"].endswith("0.050 (goal <= 0.05) FAIL")
    assert v2["streamed first audio p50, cached voice, s"].endswith("0.180 (goal <= 0.15) FAIL")
    assert v2["p50 latency of one ~8.5 s request alone, s"].endswith("0.437 (goal <= 0.4) FAIL")
    assert v2["aggregate RTF at 16 clients"].endswith("0.022 (goal <= 0.02) FAIL")
