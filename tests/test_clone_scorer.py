"""The clone scorer makes its device shapes ahead once per kind of job, and never on a CPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from voicelab.engine import scoring
from voicelab.engine.scoring import WARM_SECONDS, CloneScorer


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    def part(self, name: str) -> object:
        def warm(limit: int, count: int) -> list[int]:
            self.calls.append((name, limit, count))
            return [0]

        return warm


def _scorer(device: str, monkeypatch: pytest.MonkeyPatch) -> tuple[CloneScorer, SimpleNamespace, _Recorder]:
    recorder = _Recorder()
    scorer = CloneScorer(device)  # the judge loads its weights on first use, so nothing loads here
    monkeypatch.setattr(scorer.judge, "warm_shapes", recorder.part("ecapa"))

    def warm_f0(sr: int, limit: int, device: str) -> list[int]:
        recorder.calls.append(("f0", limit, sr))
        return [0]

    monkeypatch.setattr(scoring, "warm_f0_shapes", warm_f0)
    matcher = SimpleNamespace(encoder=SimpleNamespace(warm_shapes=recorder.part("ge2e")))
    return scorer, matcher, recorder


def test_a_gpu_scorer_warms_each_kind_of_job_once_and_again_after_unloading(monkeypatch: pytest.MonkeyPatch) -> None:
    scorer, matcher, recorder = _scorer("cuda", monkeypatch)
    scorer.warm_shapes(matcher, 22050, matched=True)  # type: ignore[arg-type]
    limit = int(WARM_SECONDS * 16000)
    assert recorder.calls == [("ecapa", limit, 2), ("ge2e", limit, 2), ("f0", int(WARM_SECONDS * 22050), 22050)]
    scorer.warm_shapes(matcher, 22050, matched=True)  # type: ignore[arg-type]
    assert len(recorder.calls) == 3  # already warm
    scorer.warm_shapes(matcher, 22050, matched=False)  # type: ignore[arg-type]
    scorer.warm_shapes(matcher, 24000, matched=False)  # type: ignore[arg-type]
    assert [call[2] for call in recorder.calls[3:]] == [1, 1, 22050, 1, 1, 24000]  # the output alone, per rate
    scorer.unload()  # Soft restart and unloading drop what the warming relied on
    scorer.warm_shapes(matcher, 22050, matched=True)  # type: ignore[arg-type]
    assert len(recorder.calls) == 12


def test_a_cpu_scorer_warms_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    scorer, matcher, recorder = _scorer("cpu", monkeypatch)
    scorer.warm_shapes(matcher, 22050, matched=True)  # type: ignore[arg-type]
    assert recorder.calls == []
