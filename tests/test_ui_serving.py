"""Safe serving: over HTTP the running app reads and writes only inside its outputs folder, uploads are capped."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.test_history_store import make_pair
from voicelab.engine.client import EngineClient
from voicelab.errors import InvalidSettingError
from voicelab.history import History
from voicelab.settings import Settings
from voicelab.ui.app_ui import build_ui
from voicelab.ui.serving import launch_options, parse_auth, serving_paths

TONE = "tests.fixture_backends:ToneBackend"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Served:
    url: str
    settings: Settings
    secret: Path
    history: History


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    base = tmp_path_factory.mktemp("serving")
    secret = base / "secret.txt"  # next to the outputs folder: must never be served
    secret.write_text("top secret")
    settings = Settings(backend=TONE, outputs_dir=str(base / "outputs"), port=free_port(), max_upload_mb=1)
    with pytest.MonkeyPatch.context() as env:
        for name in ("GRADIO_TEMP_DIR", "GRADIO_EXAMPLES_CACHE", "GRADIO_ANALYTICS_ENABLED"):
            env.delenv(name, raising=False)  # restored after the module; build_ui sets them
        client = EngineClient(settings, start=False)  # no worker: these tests never generate
        demo = build_ui(client, settings)
        demo.launch(prevent_thread_lock=True, quiet=True, **launch_options(settings))
        try:
            yield Served(
                f"http://127.0.0.1:{settings.port}", settings, secret, History(serving_paths(settings).history)
            )
        finally:
            demo.close()
            client.close()


def fetch(served: Served, path: str | Path) -> httpx.Response:
    return httpx.get(f"{served.url}/gradio_api/file={path}", timeout=10)


def test_history_audio_is_served(served: Served) -> None:
    entry = served.history.save(*make_pair())
    response = fetch(served, entry.audio_path)
    assert response.status_code == 200 and response.content[:4] == b"RIFF"


def test_files_outside_outputs_are_refused(served: Served) -> None:
    outputs = served.settings.outputs_path
    repo_file = Path(__file__).resolve()  # the working directory is not served either
    for path in ("/etc/passwd", served.secret, f"{outputs}/../{served.secret.name}", repo_file, "pyproject.toml"):
        assert fetch(served, path).status_code == 403, path


def test_a_link_inside_outputs_pointing_out_is_refused(served: Served) -> None:
    link = served.history.root / "link.wav"
    served.history.root.mkdir(parents=True, exist_ok=True)
    link.symlink_to(served.secret)
    assert fetch(served, link).status_code == 403


def test_uploads_land_inside_outputs_and_are_capped(served: Served) -> None:
    small = httpx.post(f"{served.url}/gradio_api/upload", files={"files": ("clip.wav", b"RIFF" + b"\0" * 1000)})
    assert small.status_code == 200
    [stored] = small.json()
    assert Path(stored).resolve().is_relative_to(served.settings.outputs_path)
    big = httpx.post(f"{served.url}/gradio_api/upload", files={"files": ("big.wav", b"\0" * (1024 * 1024 + 10))})
    assert big.status_code == 413


def call_api(served: Served, name: str, data: list[object]) -> tuple[str, str]:
    """Call a named endpoint as any HTTP client could; returns (event, payload) of its final message."""
    start = httpx.post(f"{served.url}/gradio_api/call/{name}", json={"data": data}, timeout=10)
    start.raise_for_status()
    event_id = start.json()["event_id"]
    stream = httpx.get(f"{served.url}/gradio_api/call/{name}/{event_id}", timeout=30).text
    event, payload = "", ""
    for line in stream.splitlines():
        if line.startswith("event:"):
            event = line.split(":", 1)[1].strip()
        elif line.startswith("data:"):
            payload = line.split(":", 1)[1].strip()
    return event, payload


def test_history_endpoints_refuse_ids_that_escape(served: Served) -> None:
    victim = served.secret.with_suffix(".json")
    victim.write_text(json.dumps({"id": "x"}))
    for bad in ("../secret", f"../../{victim.stem}", str(victim), "/etc/passwd"):
        for endpoint in ("history_show", "history_delete"):
            event, _payload = call_api(served, endpoint, [bad])
            assert event == "error", (endpoint, bad)
    assert victim.exists() and served.secret.exists()


def test_auth_setting_is_parsed_strictly() -> None:
    assert parse_auth("") is None
    assert parse_auth("ann:pa:ss") == [("ann", "pa:ss")]
    assert parse_auth("ann:one, bob:two") == [("ann", "one"), ("bob", "two")]
    with pytest.raises(InvalidSettingError, match="user:password"):
        parse_auth("no-colon")


def test_history_survives_a_server_shutdown_that_clears_gradios_cache(tmp_path: Path) -> None:
    settings = Settings(backend=TONE, outputs_dir=str(tmp_path / "outputs"), port=free_port())
    with pytest.MonkeyPatch.context() as env:
        for name in ("GRADIO_TEMP_DIR", "GRADIO_EXAMPLES_CACHE", "GRADIO_ANALYTICS_ENABLED"):
            env.delenv(name, raising=False)
        client = EngineClient(settings, start=False)
        demo = build_ui(client, settings)
        demo.launch(prevent_thread_lock=True, quiet=True, **launch_options(settings))
        served = Served(
            f"http://127.0.0.1:{settings.port}", settings, tmp_path, History(serving_paths(settings).history)
        )
        entry = served.history.save(*make_pair())
        event, payload = call_api(served, "history_list", [])
        assert event == "complete" and entry.entry_id in payload
        copies = list(serving_paths(settings).gradio_temp.rglob("*.wav"))
        assert copies, "Gradio serves a copy from its own cache folder"
        demo.close()
        client.close()
    assert entry.audio_path.exists() and entry.audio_path.with_suffix(".json").exists()
    assert History(serving_paths(settings).history).entries()[0].entry_id == entry.entry_id
    assert not any(copy.exists() for copy in copies)  # only Gradio's copies went


def test_a_generation_refreshes_history_through_the_tabs_own_refresh(served: Served) -> None:
    """Each Generate button, when it succeeds, presses History's Refresh: every refresh of the list is then one
    always-last event that reads the filter when it starts. A separate refresh after a generation read the filter
    when the generation ended and could land after the user's filtered one (the count read "2 saved generations"
    under a filter that matched one)."""
    config = httpx.get(f"{served.url}/config", timeout=10).json()
    elem = {c["id"]: c.get("props", {}).get("elem_id") for c in config["components"]}
    count = next(i for i, e in elem.items() if e == "history-count")
    refresh = next(i for i, e in elem.items() if e == "history-refresh")
    after_generation = [d for d in config["dependencies"] if d.get("trigger_after") is not None
                        and d.get("trigger_only_on_success") and "history-refresh" in (d.get("js") or "")]  # fmt: skip
    assert len(after_generation) == 3, after_generation
    assert not any(d["outputs"] for d in after_generation)  # nothing is refreshed beside the tab's own event
    listings = [d for d in config["dependencies"] if count in d["outputs"]]
    pressed = [d for d in listings if [refresh, "click"] in [list(t) for t in d["targets"]]]
    assert len(pressed) == 1 and pressed[0]["trigger_mode"] == "always_last", pressed
