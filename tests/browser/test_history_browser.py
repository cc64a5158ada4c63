"""The History tab in a real browser: filter, confirm before deleting, use as prompt, reuse settings, a table
that fits its column (tone backend)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.browser.conftest import RunningApp
from tests.browser.test_studio_browser import generate, open_studio, wait_for_text

pytestmark = pytest.mark.browser

FITS_JS = """
() => {
    const table = document.querySelector('#history-table');
    const column = table.closest('.column') || table.parentElement;
    const wrap = table.querySelector('.table-wrap') || table;
    const box = table.getBoundingClientRect(), outer = column.getBoundingClientRect();
    return {overflow: wrap.scrollWidth - wrap.clientWidth, right: box.right - outer.right};
}
"""


def show_history(page: Any, query: str) -> None:
    """The History tab, filtered by ``query`` (the tab's own refresh on select and the click are one always-last
    event, so the filtered list is what ends up shown)."""
    page.get_by_role("tab", name="History").click()
    page.wait_for_selector("#history-count", state="visible")
    page.fill("#history-filter textarea, #history-filter input", query)
    page.click("#history-refresh")
    wait_for_text(page, "#history-count", "matching the filter", timeout=30000)


def test_filter_confirm_reuse_and_use_as_prompt(page: Any, tone_app: RunningApp) -> None:
    open_studio(page, tone_app)
    tag = str(time.time_ns())
    apples, bananas = f"Alpha apples {tag}.", f"Beta bananas {tag} with a much longer sentence to wrap in the table."
    generate(page, apples)
    generate(page, bananas)  # waits for the new take, not the player still showing the first
    show_history(page, f"bananas {tag}")
    wait_for_text(page, "#history-table", "Beta bananas", timeout=30000)
    wait_for_text(page, "#history-count", "1")
    assert "Alpha apples" not in page.inner_text("#history-table")
    fit = page.evaluate(FITS_JS)
    assert fit["overflow"] <= 1 and fit["right"] <= 1, fit  # no sideways scrolling, nothing past the column

    page.click("#history-delete")  # asks first; Cancel keeps the entry
    wait_for_text(page, "#history-confirm-text", "for good?")
    assert "Beta bananas" in page.inner_text("#history-confirm-text")
    page.click("#history-cancel")
    page.wait_for_selector("#history-confirm-row", state="hidden")
    assert "Beta bananas" in page.inner_text("#history-table")

    page.click("#history-reuse")  # back to the Speak tab with the text filled in
    page.wait_for_function(
        "(t) => document.querySelector('#speak-text textarea').value === t", arg=bananas, timeout=10000
    )
    page.wait_for_selector("#speak-text textarea", state="visible", timeout=5000)

    show_history(page, f"apples {tag}")
    wait_for_text(page, "#history-table", "Alpha apples", timeout=30000)
    page.click("#history-use-prompt")  # the Clone tab, with the entry's audio as the prompt
    page.wait_for_selector("#clone-transcript textarea", state="visible", timeout=10000)
    page.wait_for_selector("#clone-prompt audio, #clone-prompt a.download-link", state="attached", timeout=10000)
    page.wait_for_function(
        "(t) => document.querySelector('#clone-transcript textarea').value === t", arg=apples, timeout=10000
    )

    show_history(page, f"bananas {tag}")
    wait_for_text(page, "#history-table", "Beta bananas", timeout=30000)
    page.click("#history-delete")
    page.click("#history-confirm")
    wait_for_text(page, "#history-table", "Beta bananas", present=False)
    wait_for_text(page, "#history-count", "0 saved generations matching the filter")
    page.wait_for_selector("#history-confirm-row", state="hidden")


def test_a_take_that_ends_while_history_is_open_joins_the_filtered_list(page: Any, tone_app: RunningApp) -> None:
    """Generate, then straight to History with a filter typed: whichever ends last, the take or the tab's own
    refresh, the list shown is the filtered one and holds the new take."""
    open_studio(page, tone_app)
    tag = str(time.time_ns())
    show_history(page, f"cherries {tag}")
    wait_for_text(page, "#history-count", "0 saved generations matching the filter")
    page.get_by_role("tab", name="Speak").click()
    page.fill("#speak-text textarea", f"Gamma cherries {tag}.")
    page.click("#speak-generate")
    page.get_by_role("tab", name="History").click()
    wait_for_text(page, "#history-table", f"Gamma cherries {tag}", timeout=30000)
    wait_for_text(page, "#history-count", "1 saved generation matching the filter")
