"""FitRelay: what the engine tells a backend that fits a voice to the job's prompt (``backends.base.FitListener``).

A fit takes seconds on a GPU and minutes on a CPU, before the job's first chunk. Its progress goes to the job's
caller as ``JobProgress`` messages (the UI's status line: "fitting voice: step 40 of 120"), through the same sink
that carries the worker's other messages; the fitted voice goes into the engine's profile LRU (the panel counts
it) and into the job's result, from which the service stores it with a saved voice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from voicelab.engine.messages import JobProgress
from voicelab.voice.fitted import FittedStyle

ProgressSink = Callable[[JobProgress], None]
FIT_STAGE = "fitting voice"


class FittedKeeper(Protocol):
    """Where a fitted voice is held (``VoiceStage``)."""

    def keep_fitted(self, fitted: FittedStyle) -> None: ...


class FitRelay:
    """One job's listener; ``style`` is the voice fitted while the job ran (``None``: none was fitted)."""

    def __init__(self, job_id: str, sink: ProgressSink | None, keeper: FittedKeeper) -> None:
        self.job_id, self.sink, self.keeper = job_id, sink, keeper
        self.style: FittedStyle | None = None

    def progress(self, step: int, total: int) -> None:
        if self.sink is not None:
            self.sink(JobProgress(self.job_id, FIT_STAGE, step, total))

    def fitted(self, style: FittedStyle) -> None:
        self.style = style
        self.keeper.keep_fitted(style)
