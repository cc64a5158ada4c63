"""Drive a running studio from outside, as a browser would: start app.py, read the resource panel, memory.

Used by the load benchmark and by the fault tests. The panel's gauges are a private Gradio event (the page
calls it by index from a 1 s timer), so :func:`call_private` speaks Gradio's queue protocol the same way.
"""

from __future__ import annotations

import html
import json
import logging
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

log = logging.getLogger(__name__)

READY_LINE = "VOICELAB READY"
APP = Path(__file__).resolve().parents[2] / "app.py"


@dataclass(frozen=True)
class PanelPoll:
    """One answer of the panel (``ok``) or a failed try; ``at`` is when it arrived (monotonic)."""

    at: float
    ok: bool
    took_s: float
    queue: int | None = None
    ui_rss: str = ""
    worker_rss: str = ""


@dataclass(frozen=True)
class Memory:
    ui_rss: int | None
    worker_rss: int | None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class AppProcess:
    """``app.py`` in a child process; ``url`` once it printed its READY line."""

    def __init__(
        self,
        args: Sequence[str],
        env: dict[str, str] | None = None,
        timeout_s: float = 180.0,
        preexec: Callable[[], None] | None = None,
    ) -> None:
        """``preexec`` runs in the child before app.py starts (the fault tests set resource limits there)."""
        self.port = free_port()
        command = [sys.executable, str(APP), "--host", "127.0.0.1", "--port", str(self.port), *args]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=APP.parent,
            preexec_fn=preexec,
        )
        self.lines: deque[str] = deque(maxlen=400)
        self.ready = False
        self._seen = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        self._seen.wait(timeout_s)
        if not self.ready:
            self.stop()
            output = "\n".join(self.lines)
            raise RuntimeError(f"app.py did not print {READY_LINE} within {timeout_s:.0f} s; its output:\n{output}")
        self.url = f"http://127.0.0.1:{self.port}"

    def _read(self) -> None:
        """Keep the app's recent output (for error reports); note the READY line or the end of output."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip())
            if READY_LINE in line:
                self.ready = True
                self._seen.set()
        self._seen.set()

    def memory(self) -> Memory:
        """RSS of the UI process and of its worker child (the one spawned process holding the model)."""
        try:
            ui = psutil.Process(self.process.pid)
            children = ui.children(recursive=True)
            worker = max(children, key=lambda c: c.memory_info().rss) if children else None
            return Memory(ui.memory_info().rss, worker.memory_info().rss if worker else None)
        except psutil.Error:
            return Memory(None, None)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM first (app.py then stops its worker cleanly), SIGKILL if it hangs."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


# ---------------------------------------------------------------- the resource panel, as the browser asks for it


def panel_fn_index(url: str) -> int:
    """The event that fills the gauges (a private event: the browser calls it by index, so do we)."""
    config = httpx.get(f"{url}/config", timeout=30).json()
    gauge_ids = {c["id"] for c in config["components"] if c.get("props", {}).get("elem_id") == "panel-gauges"}
    for index, dependency in enumerate(config["dependencies"]):
        if gauge_ids & set(dependency["outputs"]):
            return int(dependency.get("id", index))
    raise RuntimeError("the app has no resource panel (no component with elem_id 'panel-gauges')")


def call_private(url: str, fn_index: int, timeout_s: float = 30.0) -> list[Any]:
    """One call through Gradio's queue, exactly as the page does (join, then read the event stream)."""
    session = uuid.uuid4().hex
    body = {"data": [], "fn_index": fn_index, "session_hash": session, "event_data": None, "trigger_id": None}
    with httpx.Client(timeout=timeout_s) as http:
        event = http.post(f"{url}/gradio_api/queue/join", json=body).raise_for_status().json()["event_id"]
        with http.stream("GET", f"{url}/gradio_api/queue/data", params={"session_hash": session}) as stream:
            for line in stream.iter_lines():
                if not line.startswith("data:"):
                    continue
                message = json.loads(line[5:])
                if message.get("event_id") == event and message.get("msg") == "process_completed":
                    if not message.get("success", False):
                        raise RuntimeError(f"panel call failed: {message.get('output')}")
                    return list(message["output"]["data"])
    raise RuntimeError("the event stream ended without a result")


def panel_html(url: str) -> str:
    """The gauges' HTML right now (used by the fault tests too)."""
    return str(call_private(url, panel_fn_index(url))[0])


def summary_value(page: str, label: str) -> str:
    match = re.search(rf"<span>{re.escape(label)}</span><b>([^<]*)</b>", page)
    return html.unescape(match.group(1)) if match else ""


class PanelPoller(threading.Thread):
    """Asks for the gauges every ``interval_s``; each answer (or failure) is one ``PanelPoll``."""

    def __init__(self, url: str, interval_s: float = 0.5) -> None:
        super().__init__(name="panel-poller", daemon=True)
        self.url, self.interval_s = url, interval_s
        self.fn_index = panel_fn_index(url)
        self.polls: list[PanelPoll] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            began = time.monotonic()
            try:
                page = str(call_private(self.url, self.fn_index, timeout_s=10.0)[0])
                queue = re.search(r"· queue (\d+) ·", page)
                self.polls.append(
                    PanelPoll(
                        time.monotonic(),
                        True,
                        time.monotonic() - began,
                        int(queue.group(1)) if queue else None,
                        summary_value(page, "UI RSS"),
                        summary_value(page, "worker RSS"),
                    )
                )
            except (httpx.HTTPError, RuntimeError, ValueError, KeyError) as exc:
                log.warning("panel poll failed: %s", exc)
                self.polls.append(PanelPoll(time.monotonic(), False, time.monotonic() - began))
            self.stop_event.wait(max(0.0, self.interval_s - (time.monotonic() - began)))


def wait_engine_ready(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        page = panel_html(url)
        if "engine ready" in page:
            return
        if "failed to load" in page:
            raise RuntimeError("the engine failed to load: " + html.unescape(re.sub(r"<[^>]+>", " ", page)))
        time.sleep(1.0)
    raise RuntimeError(f"the engine was not ready after {timeout_s:.0f} s")


_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def parse_bytes(text: str) -> int | None:
    match = re.match(r"([\d.]+)\s*(B|KiB|MiB|GiB)", text)
    return int(float(match.group(1)) * _UNITS[match.group(2)]) if match else None


def memory_of(app: AppProcess | None, url: str) -> Memory:
    if app is not None:
        return app.memory()
    page = panel_html(url)
    return Memory(parse_bytes(summary_value(page, "UI RSS")), parse_bytes(summary_value(page, "worker RSS")))
