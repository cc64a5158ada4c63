"""Browser fixtures: the real app in a subprocess (tone backend, fast) and Debian's headless chromium.

Playwright only drives the system browser at /usr/bin/chromium; it never downloads one. Screenshots of
every browser test go to test-artifacts/ (gitignored).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
STARTUP_TIMEOUT_S = 180.0

if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"browser tests need Debian's chromium at {CHROMIUM} (apt-get install chromium)", allow_module_level=True
    )
sync_api = pytest.importorskip("playwright.sync_api", reason="browser tests need the playwright package")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class RunningApp:
    url: str
    outputs: Path
    process: subprocess.Popen[str]
    log: list[str]


def start_app(outputs: Path, backend: str | None = None) -> RunningApp:
    """Start tests/browser/serve_app.py and wait for its READY line (the worker is loaded by then)."""
    port = free_port()
    command = [sys.executable, "-m", "tests.browser.serve_app", "--port", str(port), "--outputs", str(outputs)]
    if backend:
        command += ["--backend", backend]
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            log.append(line)
            if line.startswith("VOICELAB READY"):
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not ready.wait(0.2):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_app(process)
            raise RuntimeError("the app did not start:\n" + "".join(log[-40:]))
    return RunningApp(f"http://127.0.0.1:{port}", outputs, process, log)


def stop_app(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


@pytest.fixture(scope="session")
def tone_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApp]:
    app = start_app(tmp_path_factory.mktemp("browser-outputs"))
    yield app
    stop_app(app.process)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(15000)
    yield page
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    context.close()


def save_screenshot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    return path
