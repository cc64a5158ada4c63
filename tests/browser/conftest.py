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
from pathlib import Path
from typing import Any

import pytest

from tests.served_app import stop_process

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


class RunningApp:
    """tests/browser/serve_app.py in a subprocess; ``wait_ready`` blocks until its READY line (worker loaded)."""

    def __init__(self, outputs: Path, backend: str | None = None, backend_options: str = "") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.outputs = outputs
        self.log: list[str] = []
        self._ready = threading.Event()
        command = [sys.executable, "-m", "tests.browser.serve_app", "--port", str(self.port), "--outputs", str(outputs)]
        if backend:
            command += ["--backend", backend, "--backend-options", backend_options]
        env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.log.append(line)
            if line.startswith("VOICELAB READY"):
                self._ready.set()

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> RunningApp:
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.2):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the app did not start:\n" + "".join(self.log[-40:]))
        return self

    def stop(self) -> None:
        stop_process(self.process)


class Apps:
    """The apps the browser tests run against, each started when a test first needs it. Started lazily because
    every xdist worker collects every test: starting what the collected files need started all three apps in
    both workers, each paying a server and a model load for files the other worker ran."""

    def __init__(self, folders: pytest.TempPathFactory) -> None:
        self._folders = folders
        self._running: dict[str, RunningApp] = {}

    def ready(self, kind: str) -> RunningApp:
        """The running app of ``kind`` ("tone", "builtin" or "native"), started now if it is not yet."""
        if kind not in self._running:
            self._running[kind] = self._start(kind)
        return self._running[kind].wait_ready()

    def _start(self, kind: str) -> RunningApp:
        outputs = self._folders.mktemp(f"{kind}-outputs")
        if kind == "tone":
            return RunningApp(outputs)
        if kind == "builtin":  # the default built-in voices: English (Piper) and Mandarin
            return RunningApp(outputs, "builtin")
        return RunningApp(outputs, NATIVE_BACKEND, f"chunk_delay_s={NATIVE_CHUNK_DELAY_S}")

    def stop(self) -> None:
        for app in self._running.values():
            app.stop()


NATIVE_BACKEND = "tests.fixture_native_backend:create"
NATIVE_CHUNK_DELAY_S = 1.5


@pytest.fixture(scope="session")
def apps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Apps]:
    running = Apps(tmp_path_factory)
    yield running
    running.stop()


@pytest.fixture(scope="session")
def tone_app(apps: Apps) -> RunningApp:
    return apps.ready("tone")


@pytest.fixture(scope="session")
def piper_app(apps: Apps) -> RunningApp:
    return apps.ready("builtin")


@pytest.fixture(scope="session")
def native_app(apps: Apps) -> RunningApp:
    return apps.ready("native")


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


def save_screenshot(page: Any, name: str, full_page: bool = True) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=full_page)
    return path
