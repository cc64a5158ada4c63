"""The studio in a real browser: what a user clicks and what they must see (tone backend, fast)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from tests.browser.conftest import RunningApp, save_screenshot
from tests.fixture_backends import SECONDS_PER_CHAR

pytestmark = pytest.mark.browser
PROMPT = Path(__file__).parent / "data" / "arctic_slt_en_female.wav"

AUDIO_DURATION_JS = """
async (url) => await new Promise((resolve, reject) => {
    const audio = new Audio();
    audio.preload = "metadata";
    audio.onloadedmetadata = () => resolve(audio.duration);
    audio.onerror = () => reject(new Error("audio error " + (audio.error && audio.error.code)));
    audio.src = url;
})
"""


def wait_for_text(page: Any, selector: str, text: str, present: bool = True, timeout: float = 15000) -> None:
    """Wait until the element's visible text does (or no longer does) contain ``text``."""
    page.wait_for_function(
        "([sel, text, present]) => { const el = document.querySelector(sel);"
        " return !!el && el.innerText.includes(text) === present; }",
        arg=[selector, text, present],
        timeout=timeout,
    )


def open_studio(page: Any, app: RunningApp) -> None:
    page.goto(app.url)
    page.wait_for_selector("#speak-text textarea")


TAKE_JS = "() => { const a = document.querySelector('#speak-audio a.download-link[href]'); return a ? a.href : ''; }"
# Gradio's status tracker on the take's status line hides once the event has completed ("generating" until then).
SETTLED_JS = "() => !!document.querySelector('#speak-meta .wrap.hide')"


def generate(page: Any, text: str) -> str:
    """Type, press Generate, and return the URL of the new take (a player still showing the last one is not it).
    Returns only once the event has completed: the take shows a moment before, and Gradio ignores a second press
    of a button whose event is still pending, so a caller generating twice in a row would lose its second take."""
    before = page.evaluate(TAKE_JS)
    page.fill("#speak-text textarea", text)
    page.click("#speak-generate")
    page.wait_for_function(f"(before) => {{ const now = ({TAKE_JS})(); return now && now !== before; }}", arg=before,
                           timeout=30000)  # fmt: skip
    page.wait_for_function(SETTLED_JS, timeout=30000)
    return str(page.evaluate(TAKE_JS))


def test_page_loads_with_tabs_and_panel(page: Any, tone_app: RunningApp) -> None:
    open_studio(page, tone_app)
    assert page.title() == "VoiceLab"
    for tab in ("Speak", "History"):
        assert page.get_by_role("tab", name=tab).is_visible()
    page.wait_for_selector("#panel-gauges .vl-gauge")
    assert "engine ready" in page.inner_text("#panel-gauges")


def test_generate_gives_playable_audio_of_plausible_length(page: Any, tone_app: RunningApp) -> None:
    open_studio(page, tone_app)
    text = "Hello from the browser. A second sentence follows."
    url = generate(page, text)
    duration = page.evaluate(AUDIO_DURATION_JS, url)  # the browser itself decodes it
    expected = (len("Hello from the browser.") + len("A second sentence follows.")) * SECONDS_PER_CHAR + 0.2
    assert duration == pytest.approx(expected, abs=0.02)
    meta = page.inner_text("#speak-meta")
    assert re.search(
        r"latency \d+\.\d\d s · RTF \d+\.\d+ · 1\.\d\d s of audio · (cpu|cuda\S*) · float32 · seed \d+", meta
    ), meta
    assert url.startswith(f"{tone_app.url}/gradio_api/file=outputs/.gradio/uploads/"), url  # from the outputs folder
    assert tone_app.outputs.name not in unquote(url), url  # by its served name, never by the server's path


def test_empty_text_shows_the_sentence(page: Any, tone_app: RunningApp) -> None:
    open_studio(page, tone_app)
    page.click("#speak-generate")
    page.get_by_text("Please type some text to speak.").first.wait_for()


def test_panel_gauges_change_within_two_seconds(page: Any, tone_app: RunningApp) -> None:
    open_studio(page, tone_app)
    gauges = page.wait_for_selector("#panel-gauges .vl-panel")
    first = gauges.inner_text()
    started = time.monotonic()
    page.wait_for_function(
        "(first) => document.querySelector('#panel-gauges .vl-panel').innerText !== first", arg=first, timeout=2500
    )
    assert time.monotonic() - started < 2.5


def test_clean_cache_shows_before_and_after(page: Any, tone_app: RunningApp) -> None:
    open_studio(page, tone_app)
    page.click("#panel-clear-profiles input")
    page.click("#panel-clean")
    wait_for_text(page, "#panel-report", "Clean cache")
    text = page.inner_text("#panel-report")
    on_cpu = page.query_selector("#panel-cpu-note") is not None
    assert on_cpu != bool(re.search(r"reserved: [\d.]+ [KMG]?i?B → [\d.]+ [KMG]?i?B", text)), text
    assert re.search(r"worker RSS: [\d.]+ [KMG]iB → [\d.]+ [KMG]iB", text), text
    page.click("#panel-inspect")
    if page.query_selector("#panel-cpu-note"):  # a CPU worker: no device allocator, and the panel says so once
        wait_for_text(page, "#panel-report", "No device allocator on CPU.")
        assert not page.is_visible("#panel-segments img") and "0 segments" not in page.inner_text("#panel-report")
        assert 'data-gauge="fragmentation"' not in page.inner_html("#panel-gauges")
        assert page.inner_text("#panel-gauges").count("The worker runs on the CPU") == 1
    else:
        page.wait_for_selector("#panel-segments img", state="visible")
        wait_for_text(page, "#panel-report", "segments on")


def test_soft_restart_shows_before_and_after_and_generation_continues(page: Any, tone_app: RunningApp) -> None:
    open_studio(page, tone_app)
    page.click("#panel-restart")
    wait_for_text(page, "#panel-report", "Soft restart", timeout=120000)
    assert "no worker yet" not in page.inner_text("#panel-gauges")
    wait_for_text(page, "#panel-report", ", ready in ", timeout=120000)
    text = page.inner_text("#panel-report")
    match = re.search(r"worker (\d+) → (\d+), ready in [\d.]+ s", text)
    assert match and match.group(1) != match.group(2), text
    assert "worker RSS:" in text
    page.wait_for_function(
        "(pid) => document.querySelector('#panel-gauges').innerText.includes('worker pid ' + pid)",
        arg=match.group(2),
        timeout=3000,
    )
    assert page.evaluate(AUDIO_DURATION_JS, generate(page, "After the restart.")) > 0


def test_history_lists_plays_and_deletes_a_generation(page: Any, tone_app: RunningApp) -> None:
    open_studio(page, tone_app)
    text = f"Remember me {time.time_ns()}."
    generate(page, text)
    page.get_by_role("tab", name="History").click()
    wait_for_text(page, "#history-table", text)
    player = page.wait_for_selector("#history-audio a.download-link[href]")
    duration = page.evaluate(AUDIO_DURATION_JS, player.get_attribute("href"))
    assert duration == pytest.approx(len(text) * SECONDS_PER_CHAR, abs=0.02)
    assert text in page.inner_text("#history-details")
    page.click("#history-delete")
    page.click("#history-confirm")  # deleting asks first (tests/browser/test_history_browser.py)
    wait_for_text(page, "#history-table", text, present=False)


def test_preset_fills_the_instruction_and_takes_play_side_by_side(page: Any, tone_app: RunningApp) -> None:
    open_studio(page, tone_app)
    page.get_by_role("tab", name="Design / Instruct").click()
    page.click("#design-preset input")
    page.get_by_role("option", name="News anchor", exact=True).click()
    instruction = page.locator("#design-instruction textarea")
    page.wait_for_function(
        "() => document.querySelector('#design-instruction textarea').value.includes('calm and professional')"
    )
    assert instruction.input_value() == "calm and professional, at a normal pace, clear and steady"
    assert page.locator("#design-text textarea").input_value().startswith("Good evening.")
    wait_for_text(page, "#design-parsed", "Style:")
    assert "emotion calm" in page.inner_text("#design-parsed")
    page.click("#design-generate")
    first = page.wait_for_selector("#design-take-1 a.download-link[href]", timeout=30000)
    second = page.wait_for_selector("#design-take-2 a.download-link[href]", timeout=30000)
    urls = [first.get_attribute("href"), second.get_attribute("href")]
    assert urls[0] != urls[1]
    assert all(page.evaluate(AUDIO_DURATION_JS, url) > 1.0 for url in urls)
    assert page.inner_text("#design-meta").count("take ") == 2


def test_a_queued_job_shows_its_place_in_line_and_the_panel_names_the_running_one(
    browser: Any, tone_app: RunningApp
) -> None:
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    first, second = context.new_page(), context.new_page()
    try:
        for page in (first, second):
            open_studio(page, tone_app)
        first.fill("#speak-text textarea", "sleep 4")
        first.click("#speak-generate")
        wait_for_text(first, "#panel-engine-line", "running “sleep 4”", timeout=10000)
        second.fill("#speak-text textarea", "Second in line, please.")
        second.click("#speak-generate")
        wait_for_text(second, "#speak-meta", "Queued: 1 job ahead of you", timeout=5000)
        assert "processing" not in second.inner_text("body").lower()
        assert "no worker yet" not in second.inner_text("#panel-gauges")
        assert "running “sleep 4”" in second.inner_text("#panel-engine-line")
        save_screenshot(second, "queued-place-in-line.png", full_page=False)
        second.wait_for_selector("#speak-audio a.download-link[href]", timeout=30000)
        assert "latency" in second.inner_text("#speak-meta")
    finally:
        context.close()


def test_the_tone_backend_shows_only_its_own_option(page: Any, tone_app: RunningApp) -> None:
    open_studio(page, tone_app)
    wait_for_text(page, "#backend-note", "tone")
    page.get_by_text("Advanced").first.click()
    page.wait_for_selector("#speak-noise-scale", state="visible")
    assert not page.is_visible("#speak-noise-w")  # the tone backend has no noise_w option
    assert not page.is_visible("#speak-live")  # nor streaming
