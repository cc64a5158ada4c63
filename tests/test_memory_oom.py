"""Out of memory: clean, retry once in smaller pieces, else a typed error with one clear sentence."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch

from voicelab.engine.memory import run_with_oom_retry
from voicelab.errors import DeviceOutOfMemoryError

OOM_TEXT = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB"


def test_success_needs_no_retry() -> None:
    cleans: list[int] = []
    assert run_with_oom_retry(lambda: "full", lambda: "pieces", lambda: cleans.append(1)) == "full"
    assert cleans == []


def test_oom_cleans_then_retries_in_pieces() -> None:
    events: list[str] = []

    def full() -> str:
        events.append("full")
        raise torch.OutOfMemoryError(OOM_TEXT)

    def pieces() -> str:
        events.append("pieces")
        return "joined pieces"

    retried: list[str] = []
    result = run_with_oom_retry(full, pieces, lambda: events.append("clean"), on_retry=retried.append)
    assert result == "joined pieces"
    assert events == ["full", "clean", "pieces"]
    assert retried == ["CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB"]


def test_second_oom_becomes_a_typed_error_for_the_user() -> None:
    cleans: list[int] = []

    def oom() -> str:
        raise torch.cuda.OutOfMemoryError(OOM_TEXT)

    with pytest.raises(DeviceOutOfMemoryError) as caught:
        run_with_oom_retry(oom, oom, lambda: cleans.append(1))
    assert len(cleans) == 2
    assert "Try shorter text" in str(caught.value)


def test_other_errors_are_not_retried() -> None:
    def broken() -> str:
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        run_with_oom_retry(broken, lambda: "never", lambda: pytest.fail("no clean for a non-OOM error"))


def test_the_failed_attempts_memory_is_released_before_cleaning() -> None:
    """The exception's traceback pins the failed attempt's buffers; cleaning while it lives frees nothing."""
    buffers: list[weakref.ref[np.ndarray]] = []
    seen_alive: list[bool] = []

    def full() -> str:
        activations = np.ones(8 * 1024**2, dtype=np.uint8)
        buffers.append(weakref.ref(activations))
        raise torch.OutOfMemoryError(OOM_TEXT)

    def clean() -> None:
        gc.collect()
        seen_alive.append(buffers[0]() is not None)

    assert run_with_oom_retry(full, lambda: "ok", clean) == "ok"
    assert seen_alive == [False]
