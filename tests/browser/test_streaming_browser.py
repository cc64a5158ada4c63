"""Streaming in a real browser: the Speak tab plays the first sentence before the last one is made.

The app runs the plug-in test backend (tests/fixture_native_backend.py) whose every later sentence takes
``NATIVE_CHUNK_DELAY_S`` to make, so a paragraph of five sentences needs about 6 s; the live player must be
playing while the status line still says "Generating…".
"""

from __future__ import annotations

import re
import shutil
from typing import Any

import pytest

from tests.browser.conftest import NATIVE_CHUNK_DELAY_S, RunningApp

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="Gradio streams audio through ffmpeg, not installed"),
]
PARAGRAPH = (
    "The first sentence plays at once. The second follows while you listen. A third one is still being made. "
    "The fourth comes later. And the fifth is the last."
)

PLAYING_JS = """
() => { const a = document.querySelector('#speak-live audio');
        return !!a && !a.paused && a.currentTime > 0; }
"""


def test_the_first_sentence_plays_before_the_last_is_made(page: Any, native_app: RunningApp) -> None:
    page.goto(native_app.url)
    page.wait_for_selector("#speak-text textarea")
    page.fill("#speak-text textarea", PARAGRAPH)
    page.click("#speak-generate")
    page.wait_for_function(PLAYING_JS, timeout=4 * NATIVE_CHUNK_DELAY_S * 1000)
    status = page.inner_text("#speak-meta")
    assert status.startswith("Generating… sentence "), f"audio played only after the whole text was made: {status!r}"
    assert re.match(r"Generating… sentence [1-4] of 5 ready", status), status  # done of total, honestly
    assert "latency" not in status
    link = page.wait_for_selector("#speak-audio a.download-link[href]", timeout=30000)
    assert link is not None
    final = page.inner_text("#speak-meta")
    assert "first audio" in final and "latency" in final
