"""ruff and mypy with the repository's one configuration (pyproject.toml), nothing switched off."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing() -> None:
    lint = run("ruff", "check", "voicelab", "tests", "tools", "app.py")
    assert lint.returncode == 0, lint.stdout[-3000:]
    layout = run("ruff", "format", "--check", "voicelab", "tests", "tools", "app.py")
    assert layout.returncode == 0, layout.stdout[-3000:]


@pytest.mark.slow
def test_mypy_finds_nothing() -> None:
    typed = run("mypy", "voicelab", "tools", "app.py")
    assert typed.returncode == 0, typed.stdout[-3000:]
