"""A generated fuzz suite over every Gradio endpoint's parameters, read from the running app's own API info.

For each named endpoint and each of its parameters, the other values stay valid and that one becomes NaN,
Infinity, null, the wrong type (a word, a list, an object, a boolean), huge (a 200,000-character string,
1e308) or missing. Each answer must be either a normal result or one sentence; never an HTTP 5xx, and the
server's log must hold no traceback at the end. A new endpoint is fuzzed without touching this file.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api_server import voice_clip
from tests.served_app import Answer, ServedApp, assert_one_sentence

MISSING = object()
BAD_VALUES: dict[str, Any] = {
    "nan": math.nan,
    "inf": math.inf,
    "null": None,
    "word": "abc",
    "list": [1],
    "object": {"x": 1},
    "boolean": True,
    "huge-number": 1e308,
    "huge-text": "x" * 200_000,
    "missing": MISSING,
}
WORKERS = 4  # calls at once: the queue and the control lock get exercised too
VALID = {("soft_restart", "boolean")}  # true is a real request there (a forced restart): tested on its own


@dataclass(frozen=True)
class Case:
    endpoint: str
    parameter: str
    kind: str
    data: list[Any]


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApp]:
    served = ServedApp(tmp_path_factory.mktemp("fuzz"), "--queue-size", "32")
    try:
        yield served
    finally:
        served.stop()


def baseline(app: ServedApp, client: httpx.Client, parameter: dict[str, Any]) -> Any:
    """A valid value for a parameter: its default, its example, or (for files) a clip uploaded to the app."""
    if parameter.get("component") in ("Audio", "File"):
        uploaded = client.post("/gradio_api/upload", files={"files": ("prompt.wav", voice_clip())}).json()[0]
        return {"path": uploaded, "meta": {"_type": "gradio.FileData"}}
    if parameter.get("parameter_has_default"):
        return parameter.get("parameter_default")
    if parameter.get("component") in ("Textbox",):
        return "Hello there."
    return parameter.get("example_input")


def cases(app: ServedApp, client: httpx.Client) -> list[Case]:
    info = client.get("/gradio_api/info").json()["named_endpoints"]
    found = []
    for path, endpoint in info.items():
        name = path.strip("/")
        params = endpoint["parameters"]
        valid = [baseline(app, client, p) for p in params]
        if not params:
            found += [Case(name, "-", "none", []), Case(name, "-", "extra", ["unexpected"])]
        for index, parameter in enumerate(params):
            for kind, value in BAD_VALUES.items():
                if (name, kind) in VALID:
                    continue
                data = valid[:index] if value is MISSING else [*valid[:index], value, *valid[index + 1 :]]
                found.append(Case(name, parameter["parameter_name"], kind, data))
    return found


def run(app: ServedApp, case: Case) -> tuple[Case, Answer]:
    return case, app.call(case.endpoint, case.data)


def test_every_parameter_of_every_endpoint_answers_in_one_sentence(app: ServedApp) -> None:
    with httpx.Client(base_url=app.url, timeout=60) as client:
        generated = cases(app, client)
    endpoints = {c.endpoint for c in generated}
    assert {"speak", "clone", "design", "history_list", "history_show", "history_delete", "clean_cache",
            "soft_restart", "inspect_memory", "voice_save", "voice_delete"} <= endpoints  # fmt: skip
    assert len(generated) >= 350
    with ThreadPoolExecutor(WORKERS) as pool:
        answers = list(pool.map(lambda case: run(app, case), generated))
    problems = []
    for case, answer in answers:
        label = f"{case.endpoint}({case.parameter}={case.kind})"
        if answer.event == "complete":
            continue
        if answer.event != "error" or answer.status >= 500:
            problems.append(f"{label}: {answer}")
            continue
        try:
            assert_one_sentence(answer.sentence)
        except AssertionError as exc:
            problems.append(f"{label}: {exc}")
    assert problems == [], "\n".join(problems[:30])
    refusals = sum(1 for _, a in answers if a.event == "error")
    assert refusals >= len(generated) // 2, "most of these values must be refused"
    assert "Traceback" not in app.log, app.log[app.log.find("Traceback") - 2000 :][:6000]
    health = httpx.get(f"{app.url}/health", timeout=30).json()
    assert health["restarts"] == 0 and health["status"] == "ok", health  # no value restarted or broke the worker


def test_the_suite_reads_its_endpoints_from_the_app(app: ServedApp, tmp_path: Path) -> None:
    """The generated list follows the app: every parameter of /design appears with every kind of bad value."""
    with httpx.Client(base_url=app.url, timeout=60) as client:
        generated = cases(app, client)
    design = {(c.parameter, c.kind) for c in generated if c.endpoint == "design"}
    names = ["text", "takes", "voice_id", "instruction", "age", "gender", "pitch", "pitch_variation", "volume",
             "speed", "emotion"]  # fmt: skip
    assert design == {(n, k) for n in names for k in BAD_VALUES}
