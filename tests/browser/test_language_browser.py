"""English and Chinese in a real browser, and the controls of a native backend.

The app runs the plug-in native backend (tests/fixture_native_backend.py: English and Chinese, native cloning and
instructions, streaming, no Piper options). A Chinese browser gets the Chinese page, Chinese examples first and
Chinese instruction presets first; the switch turns it to English (presets and examples too) and is remembered
across a reload. The Clone tab carries the instruction box, presets and dropdowns; the Piper sliders are hidden.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import RunningApp, save_screenshot
from tests.browser.test_studio_browser import wait_for_text

pytestmark = pytest.mark.browser
TABS_ZH = ["朗读", "克隆", "设计 / 指令", "历史"]
TABS_EN = ["Speak", "Clone", "Design / Instruct", "History"]


def open_in(browser: Any, app: RunningApp, locale: str) -> tuple[Any, Any]:
    context = browser.new_context(locale=locale, viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(15000)
    page.goto(app.url)
    page.wait_for_selector("#speak-text textarea")
    wait_for_text(page, "#backend-note", "native-test")  # the load handler has shaped the page
    return context, page


def tabs(page: Any) -> list[str]:
    return [tab.inner_text() for tab in page.get_by_role("tab").all()]


def wait_for_tabs(page: Any, names: list[str]) -> None:
    page.wait_for_function(
        "(names) => JSON.stringify([...document.querySelectorAll('[role=tab]')].map(t => t.innerText))"
        " === JSON.stringify(names)",
        arg=names,
    )


def first_example(page: Any) -> str:
    return str(page.locator("#speak-examples button").first.inner_text())


def first_preset(page: Any) -> str:
    page.get_by_role("tab", name=tabs(page)[2]).click()
    page.click("#design-preset input")
    name = str(page.get_by_role("option").first.inner_text())
    page.keyboard.press("Escape")
    return name


def test_a_chinese_browser_gets_chinese_and_the_switch_turns_it_english(browser: Any, native_app: RunningApp) -> None:
    context, page = open_in(browser, native_app, "zh-CN")
    try:
        wait_for_tabs(page, TABS_ZH)
        assert page.inner_text("#speak-text label").strip() == "文本"
        assert page.inner_text("#speak-generate").strip() == "生成"
        assert first_example(page).startswith("今天天气很好")
        assert first_preset(page) == "四川话 (Sichuanese)"  # a native backend's dialect instruction, in Chinese
        save_screenshot(page, "ui-chinese.png", full_page=False)
        page.click("#ui-language label:has-text('English')")
        wait_for_tabs(page, TABS_EN)
        assert page.inner_text("#design-instruction label").strip() == "Style instruction"
        assert first_preset(page) == "Fast"
        page.get_by_role("tab", name="Speak").click()
        assert first_example(page).startswith("The quick brown fox")
        page.reload()
        page.wait_for_selector("#speak-text textarea")
        wait_for_text(page, "#backend-note", "native-test")
        wait_for_tabs(page, TABS_EN)  # remembered
        assert page.inner_text("#speak-text label").strip() == "Text"
    finally:
        context.close()


def test_an_english_browser_gets_english(browser: Any, native_app: RunningApp) -> None:
    context, page = open_in(browser, native_app, "en-US")
    try:
        wait_for_tabs(page, TABS_EN)
        assert first_example(page).startswith("The quick brown fox")
        assert page.is_checked("#ui-language input[value=en]")
    finally:
        context.close()


def test_the_clone_tab_has_the_style_controls_and_no_piper_sliders(browser: Any, native_app: RunningApp) -> None:
    context, page = open_in(browser, native_app, "en-US")
    try:
        page.get_by_role("tab", name="Clone").click()
        page.locator("#clone-sculptor").get_by_text("Voice-Sculptor controls").click()
        for element in ("#clone-instruction textarea", "#clone-preset", "#clone-pitch", "#clone-emotion"):
            page.wait_for_selector(element, state="attached", timeout=20_000)  # the accordion renders lazily
            assert page.locator(element).count() == 1, element
        assert page.is_visible("#clone-instruction textarea") and page.is_visible("#clone-preset")
        page.locator("#clone-instruction textarea").fill("speak higher, happily")
        wait_for_text(page, "#clone-parsed", "pitch +3.0 st")
        page.get_by_text("Advanced").nth(1).click()
        assert not page.is_visible("#clone-noise-scale") and not page.is_visible("#clone-noise-w")
        assert "reads the instruction itself" in page.inner_text("#backend-note")
    finally:
        context.close()
