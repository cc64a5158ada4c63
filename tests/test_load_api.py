"""bench load --api: a short run against app.py (tone backend), and how each kind of answer is counted."""

from __future__ import annotations

import io
import time

import httpx
import numpy as np
import pytest
import soundfile as sf

from voicelab.bench.first_byte import summary_lines
from voicelab.bench.load import Outcome, Submission, parse_args
from voicelab.bench.load_api import first_byte_rows, run_load_api, speak_api_once

TONE = "tests.fixture_backends:ToneBackend"


@pytest.mark.serial  # its latencies and panel freshness are judged: alone, not beside another test process
def test_one_then_four_streaming_api_clients_lose_and_duplicate_nothing_and_time_the_first_byte() -> None:
    flags = ["--api", "--clients", "1,4", "--duration", "3", "--backend", TONE, "--queue-size", "2", "--device", "cpu"]
    args = parse_args([*flags, "--request-timeout", "60", "--format", "pcm", "--chars", "90"])
    reports = run_load_api(args)
    assert [len({s.client for s in r.submissions}) for r in reports] == [1, 4] and len(reports[1].submissions) >= 8
    for report in reports:
        assert report.lost == 0 and report.duplicated == 0 and report.count("error") == 0 and report.unsaved == 0
        assert report.count("ok") + report.count("busy") == len(report.submissions)
        assert report.max_staleness_s < 2.0 and report.passed
        assert all(0 < (o.first_byte_s or 0) <= o.latency_s for o in report.outcomes if o.kind == "ok")
        assert all(len(o.submission.text) > 60 for o in report.outcomes)  # about 90: two sentences or three
    rows = first_byte_rows(reports, args.clients)
    assert [r.clients for r in rows] == [1, 4] and all(r.ok > 0 for r in rows)
    assert float(summary_lines(rows, "pcm")[-1].split()[-1]) > 0  # each count against the lone one


def answer(status: int, content: bytes = b"", headers: dict[str, str] | None = None, json: object = None) -> Outcome:
    def handler(request: httpx.Request) -> httpx.Response:
        if json is not None:
            return httpx.Response(status, headers=headers, json=json)
        return httpx.Response(status, content=content, headers=headers)

    http = httpx.Client(base_url="http://test", transport=httpx.MockTransport(handler))
    submission = Submission(1, 0, 42, "Hello.", time.monotonic())
    return speak_api_once(http, submission, 5.0)


def test_each_answer_becomes_one_outcome() -> None:
    wav = io.BytesIO()
    sf.write(wav, np.full(1600, 0.1, np.float32), 16000, format="WAV")
    ok = answer(200, wav.getvalue(), {"x-seed": "42", "x-job-id": "abc"})
    assert ok.kind == "ok" and ok.echoed_seed == 42 and ok.audio_path == "job:abc"
    busy_body = {"error": {"message": "The engine is busy: 4 jobs are already waiting. Please try again in a moment."}}
    assert answer(429, headers={"retry-after": "2"}, json=busy_body).kind == "busy"
    assert answer(429, json=busy_body).kind == "error"  # a 429 without Retry-After is not a clear "busy"
    assert answer(500, json={"error": {"message": "Boom."}}).message == "Boom."
    assert answer(200, b"not audio").kind == "error"
