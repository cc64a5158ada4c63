"""A short load run against the real app (tone backend): nothing lost, nothing duplicated, the panel stays fresh.

Also checks the benchmark's own bookkeeping on made-up runs, so a lost or duplicated request cannot slip by
uncounted.
"""

from __future__ import annotations

import re

import pytest
from gradio_client.exceptions import AppError

from voicelab.bench.load import (
    STALE_LIMIT_S,
    LoadReport,
    Outcome,
    Submission,
    parse_args,
    print_report,
    run_load,
    speak_once,
)
from voicelab.bench.load_api import main
from voicelab.bench.studio import PanelPoll

TONE = "tests.fixture_backends:ToneBackend"
CLIENTS = 8
DURATION_S = 8.0


@pytest.mark.serial  # the panel must answer within 2 s under this load: judged alone, not beside another test process
def test_eight_clients_for_eight_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--clients", str(CLIENTS), "--duration", str(DURATION_S), "--backend", TONE, "--queue-size", "4"]
    args = parse_args([*flags, "--device", "cpu", "--request-timeout", "120"])
    report = run_load(args)
    print_report(report, 10.0)
    out = capsys.readouterr().out
    assert len({s.client for s in report.submissions}) == CLIENTS, "every client got to submit"
    assert len(report.submissions) >= 2 * CLIENTS
    assert report.lost == 0 and report.duplicated == 0 and report.count("error") == 0
    assert report.count("ok") + report.count("busy") == len(report.submissions)
    assert report.saved_seeds is not None and report.unsaved == 0 and len(report.saved_seeds) == report.count("ok")
    assert report.max_staleness_s <= STALE_LIMIT_S, out
    assert report.memory_end is not None and report.memory_end.worker_rss and report.memory_end.ui_rss
    line = re.search(r"requests: (\d+) ok: (\d+) busy: (\d+) errors: 0 lost: 0 duplicated: 0", out)
    assert line and int(line.group(1)) == len(report.submissions), out
    assert re.search(r"max panel staleness: \d+\.\d\d s", out) and "RSS start → end: UI" in out
    assert "verdict: PASS" in out


def _report(outcomes: list[Outcome], submissions: list[Submission], polls: list[float]) -> LoadReport:
    return LoadReport(submissions, outcomes, [PanelPoll(t, True, 0.1) for t in polls], 0.0, 10.0)


def _ok(submission: Submission, path: str, seed: int | None = None) -> Outcome:
    return Outcome(submission, "ok", 1.0, audio_path=path, meta=f"latency 0.1 s · seed {seed or submission.seed}")


def test_bookkeeping_catches_lost_duplicated_and_stale() -> None:
    subs = [Submission(0, i, i, "Hi.", 0.5) for i in range(4)]
    polls = [0.5 * k for k in range(1, 20)]
    clean = _report([_ok(s, f"/h/{s.index}.wav") for s in subs], subs, polls)
    assert (clean.lost, clean.duplicated, clean.passed) == (0, 0, True)
    assert clean.max_staleness_s == pytest.approx(0.5)

    missing = _report([_ok(s, f"/h/{s.index}.wav") for s in subs[:3]], subs, polls)
    assert missing.lost == 1 and not missing.passed
    same_file = _report([_ok(s, "/h/same.wav") for s in subs], subs, polls)
    assert same_file.duplicated == 3
    wrong_seed = _report([_ok(s, f"/h/{s.index}.wav", seed=99) for s in subs], subs, polls)
    assert wrong_seed.duplicated >= 4
    twice = _report([_ok(s, f"/h/{s.index}.wav") for s in subs] + [_ok(subs[0], "/h/x.wav")], subs, polls)
    assert twice.duplicated >= 1 and not twice.passed
    stale = _report([_ok(s, f"/h/{s.index}.wav") for s in subs], subs, [0.5, 1.0, *(4.0 + 0.5 * k for k in range(12))])
    assert stale.max_staleness_s == pytest.approx(3.0) and not stale.passed
    unsaved = _report([_ok(s, f"/h/{s.index}.wav") for s in subs], subs, polls)
    unsaved.saved_seeds = [0, 1, 2]
    assert unsaved.unsaved == 1 and not unsaved.passed


class _FakeJob:
    def __init__(self, error: BaseException | None, value: tuple[object, str] = ("", "")) -> None:
        self.error, self.value = error, value

    def result(self, timeout: float) -> tuple[object, str]:
        if self.error is not None:
            raise self.error
        return self.value

    def cancel(self) -> bool:
        return True


class _FakeClient:
    def __init__(self, job: _FakeJob) -> None:
        self.job = job

    def submit(self, *args: object, api_name: str) -> _FakeJob:
        assert api_name == "/speak" and len(args) == 6
        return self.job


@pytest.mark.parametrize(
    ("job", "kind"),
    [
        (_FakeJob(AppError("The engine is busy: 16 jobs are already waiting. Please try again in a moment.")), "busy"),
        (_FakeJob(AppError("Please type some text to speak.")), "error"),
        (_FakeJob(AppError("busy\nTraceback (most recent call last): [Errno 11]")), "error"),
        (_FakeJob(TimeoutError()), "lost"),
        (_FakeJob(ConnectionError("reset by peer")), "lost"),
        (_FakeJob(None, ({"path": "/out/history/a.wav"}, "seed 5")), "ok"),
        (_FakeJob(None, (None, "seed 5")), "error"),
    ],
)
def test_every_way_a_request_ends_is_classified(job: _FakeJob, kind: str) -> None:
    outcome = speak_once(_FakeClient(job), Submission(0, 0, 5, "Hi.", 0.0), timeout_s=1.0)
    assert outcome.kind == kind


def test_cli_says_why_when_the_app_is_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", "http://127.0.0.1:9", "--clients", "1", "--duration", "1"]) == 2
    assert "error: the load run could not start" in capsys.readouterr().err
