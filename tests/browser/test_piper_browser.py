"""One end-to-end run with the real built-in voice (Piper en_US-joe-medium in PyTorch), not the tone stand-in."""

from __future__ import annotations

import importlib.util
import io
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from tests.browser.conftest import RunningApp, save_screenshot
from tests.browser.test_studio_browser import AUDIO_DURATION_JS, PROMPT, generate, open_studio, wait_for_text

pytestmark = pytest.mark.browser

if importlib.util.find_spec("voicelab.backends.piper.backend") is None:
    pytest.skip("the PyTorch Piper backend is not in this checkout yet", allow_module_level=True)


def test_the_built_in_voice_speaks_in_the_browser(page: Any, piper_app: RunningApp) -> None:
    open_studio(page, piper_app)
    text = "The quick brown fox jumps over the lazy dog."
    url = generate(page, text)
    duration = page.evaluate(AUDIO_DURATION_JS, url)
    assert 1.5 < duration < 6.0, duration  # about 2.5 s of speech for nine words
    samples, sample_rate = sf.read(io.BytesIO(page.request.get(url).body()))
    assert sample_rate == 22050
    rms = float(np.sqrt(np.mean(np.square(samples))))
    assert rms > 0.01, "the audio is silent"
    meta = page.inner_text("#speak-meta")
    assert "cpu" in meta or "cuda" in meta
    assert "piper" in page.inner_text("#panel-gauges")
    wait_for_text(page, "#panel-gauges", "1 done")  # the panel has caught up with the finished job
    save_screenshot(page, "main-page-piper.png", full_page=False)


def test_history_shows_the_piper_generation(page: Any, piper_app: RunningApp) -> None:
    open_studio(page, piper_app)
    page.get_by_role("tab", name="History").click()
    wait_for_text(page, "#history-table", "The quick brown fox")
    assert "piper" in page.inner_text("#history-table")
    assert Path(piper_app.outputs, "history").is_dir()


def test_cloning_with_the_built_in_voice_shows_similarity(page: Any, piper_app: RunningApp) -> None:
    open_studio(page, piper_app)
    page.get_by_role("tab", name="Clone").click()
    page.set_input_files("#clone-prompt input[type=file]", str(PROMPT))
    page.fill("#clone-text textarea", "A short sentence in the uploaded voice.")
    page.click("#clone-generate")
    page.wait_for_selector("#clone-audio a.download-link[href]", timeout=120000)  # first clone loads the encoder
    wait_for_text(page, "#clone-figures", "Prompt:")
    figures = page.inner_text("#clone-figures")
    assert re.search(r"Similarity to the prompt: -?\d\.\d\d → -?\d\.\d\d", figures), figures
    assert re.search(r"Median pitch: prompt \d+ Hz · output \d+ Hz", figures), figures
    assert re.search(r"Profile cache: \d of \d+ voices · hit rate \d+%", figures), figures
