"""The documentation's screenshots: every tab in English and in Chinese, and the panel while a generation runs.

    python -m tools.screenshots --url http://127.0.0.1:7871 --out docs/screenshots

Against a running studio (``./run.sh --port 7871``, the built-in voices), through Debian's chromium (never a
downloaded browser). Chinese labels need a CJK font on the machine (Debian: ``fonts-noto-cjk``). Each picture is
kept under ``--max-kb`` by reducing it to a 256-colour palette when the plain PNG is larger.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PIL import Image

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
PROMPT = DATA / "arctic_slt_en_female.wav"
LONG_WAIT_MS = 240_000  # the first clone builds the prompt's profile and loads the judges on a small CPU

TEXTS = {
    "en": {
        "speak": "The old lighthouse keeper climbed the spiral stairs every evening at dusk. He wiped the great lens, "
        "lit the lamp and watched the ships pass. On stormy nights he stayed awake until dawn. The sailors "
        "never knew his name, but they knew his light. When he retired, the town gave him a small brass bell.",
        "clone": "Good morning. This sentence is spoken in the uploaded voice.",
        "design": "Once upon a time, in a small village by the sea, there lived a very curious cat.",
    },
    "zh": {
        "speak": "今天天气很好，我们去公园散步吧。湖边的柳树已经发芽了，孩子们在草地上放风筝。"
        "傍晚的时候，我们再一起回家吃饭。",
        "clone": "早上好，这句话用上传的声音来说。",
        "design": "从前，在海边的一个小村庄里，住着一只非常好奇的小猫。",
    },
}
FULL_PAGE = ("clone", "design")  # taller than the window: the figures and the takes lie below the controls
TRANSCRIPT = (DATA / "arctic_slt_en_female.txt").read_text().strip()


def save(page: Any, path: Path, max_kb: int, full_page: bool = False) -> None:
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(path), full_page=full_page)
    if path.stat().st_size > max_kb * 1024:
        Image.open(path).convert("RGB").quantize(256).save(path, optimize=True)
    print(f"{path} {path.stat().st_size // 1024} KB")


def open_page(browser: Any, url: str, locale: str) -> Any:
    context = browser.new_context(locale=locale, viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    page.goto(url)
    page.wait_for_function("() => (document.querySelector('#panel-gauges')?.innerText || '').includes('ready')")
    return page


def tab(page: Any, index: int) -> None:
    page.get_by_role("tab").nth(index).click()
    page.wait_for_timeout(500)


def speak(page: Any, text: str, shot: Callable[[str], None]) -> None:
    """A long text: the picture of the panel while it runs (a sentence ready, the job in flight), then the take."""
    page.fill("#speak-text textarea", text)
    page.click("#speak-generate")
    page.wait_for_function("() => (document.querySelector('#speak-meta')?.innerText || '').includes(' ready (')")
    page.wait_for_timeout(1200)  # the panel's next refresh names the job in flight
    shot("generating")
    page.wait_for_selector("#speak-audio a.download-link[href]", timeout=LONG_WAIT_MS)
    page.wait_for_timeout(1500)
    shot("speak")


def clone(page: Any, text: str, shot: Callable[[str], None]) -> None:
    tab(page, 1)
    page.set_input_files("#clone-prompt input[type=file]", str(PROMPT))
    page.fill("#clone-transcript textarea", TRANSCRIPT)
    page.fill("#clone-text textarea", text)
    page.click("#clone-generate")
    page.wait_for_selector("#clone-audio a.download-link[href]", timeout=LONG_WAIT_MS)
    page.wait_for_timeout(1500)
    shot("clone")


def design(page: Any, text: str, preset: int, shot: Callable[[str], None]) -> None:
    tab(page, 2)
    page.click("#design-preset input")
    page.get_by_role("option").nth(preset).click()
    page.wait_for_timeout(500)
    page.fill("#design-text textarea", text)
    page.click("#design-generate")
    page.wait_for_selector("#design-take-2 a.download-link[href]", timeout=LONG_WAIT_MS)
    page.wait_for_timeout(1500)
    shot("design")


def history(page: Any, shot: Callable[[str], None]) -> None:
    tab(page, 3)
    page.wait_for_function("() => (document.querySelector('#history-count')?.innerText || '').match(/\\d/)")
    page.wait_for_timeout(1000)
    shot("history")


def shoot_language(browser: Any, args: argparse.Namespace, language: str) -> None:
    page = open_page(browser, args.url, "zh-CN" if language == "zh" else "en-US")
    texts = TEXTS[language]

    def shot(name: str) -> None:
        save(page, args.out / f"{name}-{language}.png", args.max_kb, full_page=name in FULL_PAGE)

    speak(page, texts["speak"], shot)
    clone(page, texts["clone"], shot)
    design(page, texts["design"], 1, shot)
    history(page, shot)
    page.context.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.screenshots", description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:7860")
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots"))
    parser.add_argument("--languages", default="en,zh")
    parser.add_argument("--max-kb", type=int, default=300)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        for language in args.languages.split(","):
            shoot_language(browser, args, language)
        browser.close()


if __name__ == "__main__":
    main()
