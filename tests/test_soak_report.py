"""The soak's tail lines: what set its p95 after the warm-up, plain and prompted requests apart."""

from __future__ import annotations

from voicelab.bench.soak_report import SoakResult, TimedRequest, tail_lines


def _result() -> SoakResult:
    plain = [TimedRequest(i, 10 * i, False, 0.02 + 0.001 * i) for i in range(1, 81) if i % 4]
    prompted = [TimedRequest(i, 5 * i, True, 0.05 + 0.002 * i) for i in range(4, 81, 4)]
    warm_up = [TimedRequest(2, 400, True, 9.0)]  # a prompt's first analysis: inside the first window
    return SoakResult("managed", requests=[*warm_up, *plain, *prompted])


def test_the_tail_lines_leave_out_the_warm_up_and_name_the_slowest_requests_with_their_kind() -> None:
    lines = tail_lines(_result(), after=50, count=3)

    assert lines[0] == "after request 50:"
    assert lines[1].startswith("  plain: 22 requests,") and "max 0.099s" in lines[1]
    assert lines[2].startswith("  with a prompt voice: 8 requests,") and "max 0.210s" in lines[2]
    assert lines[3] == (
        "  slowest: #80 400 chars +prompt 0.210s, #76 380 chars +prompt 0.202s, #72 360 chars +prompt 0.194s"
    )
    assert "9.000" not in "\n".join(lines)


def test_a_run_with_nothing_after_the_warm_up_prints_no_tail() -> None:
    assert tail_lines(_result(), after=80) == []
