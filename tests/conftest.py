"""Shared fixtures; GPU tests skip cleanly without CUDA."""

from __future__ import annotations

import os

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
