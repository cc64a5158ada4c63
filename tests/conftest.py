"""Shared fixtures; GPU tests skip cleanly without CUDA."""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with CUDA; this machine has none")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_tracing_left_on() -> Iterator[None]:
    """A test that leaves tracemalloc on slows every later test in its worker: each allocation then records a
    traceback (a 2 s file scan once took 67 s after a memory tool's ``main`` ran in-process)."""
    yield
    if tracemalloc.is_tracing():
        tracemalloc.stop()
        pytest.fail("this test left tracemalloc tracing; it was stopped")


@pytest.fixture(scope="module")
def core() -> Iterator[Any]:
    """A CPU engine core for one test module (one torch thread; the caller's thread count restored after)."""
    import torch

    from voicelab.engine.core import EngineCore
    from voicelab.settings import Settings

    threads = torch.get_num_threads()
    engine = EngineCore(Settings(device="cpu", torch_threads=1))
    try:
        yield engine
    finally:
        engine.close()
        torch.set_num_threads(threads)
