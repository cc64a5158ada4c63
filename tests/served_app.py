"""The real studio (``app.py``) in a child process, for tests that drive its Gradio endpoints over HTTP.

It runs in its own working directory (so ``outputs/`` lies under it, as with ``./run.sh``), keeps all of its
output (the edge tests assert that no traceback ever reaches the log) and calls endpoints the way any HTTP
client would: ``POST /gradio_api/call/<name>`` with raw JSON, then read the event stream.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from voicelab.bench.studio import free_port

REPO = Path(__file__).resolve().parents[1]
TONE = "tests.fixture_backends:ToneBackend"
READY = "VOICELAB READY"


@dataclass(frozen=True)
class Answer:
    """One endpoint call: ``event`` is "complete" or "error"; ``data`` the outputs or the error's sentence."""

    event: str
    data: Any
    status: int = 200

    @property
    def sentence(self) -> str:
        if isinstance(self.data, dict):
            return str(self.data.get("error") or self.data.get("detail") or "")
        return str(self.data)


class ServedApp:
    def __init__(self, cwd: Path, *args: str, timeout_s: float = 240.0) -> None:
        self.cwd = cwd
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, str(REPO / "app.py"), "--host", "127.0.0.1", "--port", str(self.port)]
        command += ["--backend", TONE, "--device", "cpu", "--max-upload-mb", "5", *args]
        env = {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
               "PATH": "/usr/bin:/bin", "VOICELAB_LOG_LEVEL": "INFO", "PYTHONPATH": str(REPO)}  # fmt: skip
        self.process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        # One client for every call without a login: a new httpx.Client builds an SSL context (~25 ms of CPU),
        # which the fuzz suite's hundreds of calls paid each time. httpx's clients are safe across threads.
        self.http = httpx.Client(base_url=self.url, timeout=120.0)
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self._ready.wait(timeout_s) or self.process.poll() is not None:
            self.stop()
            raise RuntimeError("app.py did not start:\n" + "".join(self.lines[-40:]))

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            if line.startswith(READY):
                self._ready.set()
        self._ready.set()

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def call(self, name: str, data: list[Any], auth: httpx.Client | None = None, timeout: float = 120.0) -> Answer:
        """``POST /gradio_api/call/<name>`` with ``data`` as raw JSON (NaN and Infinity included), then its result."""
        client = auth or self.http
        body = json.dumps({"data": data})  # allow_nan: JavaScript's NaN/Infinity, as a careless client sends them
        posted = client.post(
            f"/gradio_api/call/{name}", content=body, headers={"content-type": "application/json"}, timeout=timeout
        )
        if posted.status_code != 200:
            return Answer("http", posted.json() if posted.headers.get("content-type", "").startswith("application/json")
                          else posted.text, posted.status_code)  # fmt: skip
        events = client.get(f"/gradio_api/call/{name}/{posted.json()['event_id']}", timeout=timeout).text
        event, payload = "", None
        for line in events.splitlines():
            if line.startswith("event: "):
                event = line[len("event: ") :]
            elif line.startswith("data: ") and event in ("complete", "error"):
                payload = json.loads(line[len("data: ") :])
        return Answer(event, payload)

    def page_event(self, client: httpx.Client, fn_index: int, data: list[Any]) -> Answer:
        """One of the page's own events (private ones too), as the browser runs it: ``POST /gradio_api/queue/join``
        with its function index, then the browser session's ``/gradio_api/queue/data`` stream up to its result."""
        browser = secrets.token_hex(6)  # the page's session hash
        body = {"data": data, "fn_index": fn_index, "session_hash": browser, "event_data": None, "trigger_id": None}
        joined = client.post("/gradio_api/queue/join", json=body)
        if joined.status_code != 200:
            return Answer("http", joined.json(), joined.status_code)
        with client.stream("GET", f"/gradio_api/queue/data?session_hash={browser}") as stream:
            for line in stream.iter_lines():
                message = json.loads(line[len("data: ") :]) if line.startswith("data: ") else {}
                if message.get("msg") == "process_completed":
                    output = message.get("output", {})
                    if message.get("success"):
                        return Answer("complete", output.get("data"))
                    return Answer("error", output)
        return Answer("closed", None)

    def login(self, user: str, password: str) -> httpx.Client:
        """An HTTP client logged in through Gradio's login form (its session cookie)."""
        client = httpx.Client(base_url=self.url, timeout=120.0)
        answer = client.post("/login", data={"username": user, "password": password})
        assert answer.status_code == 200, answer.text
        return client

    def stop(self) -> None:
        self.http.close()
        stop_process(self.process)


@contextlib.contextmanager
def served_app(cwd: Path, *args: str) -> Iterator[ServedApp]:
    """A served app for a module's tests; once stopped, its log must show no traceback."""
    app = ServedApp(cwd, *args)
    try:
        yield app
    finally:
        app.stop()
        assert "Traceback" not in app.log, app.log[-4000:]


def stop_process(process: subprocess.Popen[Any]) -> None:
    """Terminate a served app (20 s to exit cleanly), then kill it; nothing if it has already gone."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def assert_one_sentence(text: str) -> None:
    """What a user reads after a refusal: one short sentence, no Python, no server path."""
    assert text and len(text) < 220, f"{len(text)} characters: {text!r}"
    assert text.rstrip().endswith((".", "?", ")")), text
    for marker in ("Traceback", "\n", "<gradio.", "Error:", "object at 0x", 'File "', "/tmp/", "/work/", "/root/"):
        assert marker not in text, f"{marker!r} in {text!r}"
