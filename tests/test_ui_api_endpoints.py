"""The studio's named endpoints as API clients use them, with the outputs folder outside the working directory (an
absolute ``--outputs-dir``, as in any container): ``gradio_client`` and plain HTTP fetch every output, ``/speak``,
``/clone`` and ``/design`` answer plain values (the audio file, its subtitles, the status line; Clone's figures;
Design's takes), only the outputs folder is served, and a request may name only files this server received.

One app serves the module (tone backend, no login): its working directory lies two folders below the parent it
shares with the outputs folder, so a path relative to the working directory would start with ``../..``.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import soundfile as sf

from tests.api_server import voice_clip
from tests.fixture_backends import SECONDS_PER_CHAR
from tests.served_app import Answer, ServedApp, assert_one_sentence, served_app

SPEAK = ["Hello there. How are you?", 1.0, 0.667, 0.8, 0.2, -1, "auto"]
NOT_RECEIVED = "The voice prompt must be a file uploaded to this server first (POST /gradio_api/upload), or null."


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApp]:
    base = tmp_path_factory.mktemp("elsewhere")
    cwd = base / "srv" / "studio"
    cwd.mkdir(parents=True)
    with served_app(cwd, "--outputs-dir", str(base / "data" / "voicelab")) as served:
        yield served


@pytest.fixture(scope="module")
def client(app: ServedApp, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from gradio_client import Client

    downloads = tmp_path_factory.mktemp("downloads")
    connected = Client(app.url + "/", verbose=False, download_files=str(downloads))
    try:
        yield connected
    finally:
        connected.close()


def outputs_of(app: ServedApp) -> Path:
    return app.cwd.parents[1] / "data" / "voicelab"


def seconds(path: str) -> float:
    audio, rate = sf.read(path)
    return len(audio) / rate


def cue_texts(path: str) -> list[str]:
    """The subtitles' text lines (SubRip: number, times, text, blank)."""
    blocks = Path(path).read_text(encoding="utf-8").strip().split("\n\n")
    return [block.splitlines()[2] for block in blocks]


def file_value(path: str | Path) -> dict[str, object]:
    return {"path": str(path), "meta": {"_type": "gradio.FileData"}}


def test_speak_answers_the_audio_file_its_subtitles_and_the_status_line(client: Any) -> None:
    audio, subtitles, status = client.predict(text="Hello there. How are you?", api_name="/speak")
    spoken = (len("Hello there.") + len("How are you?")) * SECONDS_PER_CHAR + 0.2
    assert seconds(audio) == pytest.approx(spoken, abs=0.01)
    assert cue_texts(subtitles) == ["Hello there. How are you?"]  # the tone backend says it in one chunk
    assert "s of audio" in status and "seed" in status


def test_clone_answers_audio_subtitles_status_and_figures(client: Any, tmp_path: Path) -> None:
    from gradio_client import handle_file

    clip = tmp_path / "prompt.wav"
    clip.write_bytes(voice_clip())
    audio, subtitles, status, figures = client.predict(
        prompt=handle_file(str(clip)), transcript="", text="Hello there.", instruction="", api_name="/clone"
    )
    assert seconds(audio) == pytest.approx(len("Hello there.") * SECONDS_PER_CHAR, abs=0.01)
    assert cue_texts(subtitles) == ["Hello there."]
    assert "seed" in status and "Similarity to the prompt" in figures and "Median pitch" in figures


def test_design_answers_each_take_as_a_file_and_unused_takes_as_null(client: Any) -> None:
    *takes, status, style = client.predict(text="Two takes.", takes=2, instruction="", api_name="/design")
    assert [take is not None for take in takes] == [True, True, False, False]
    assert all(seconds(take) > 0 for take in takes[:2])
    assert "take 2:" in status and style.startswith("**Style:**")


def test_plain_http_fetches_each_output_by_its_url_and_no_server_path_is_shown(app: ServedApp) -> None:
    answer = app.call("speak", SPEAK)
    assert answer.event == "complete", answer
    files = {Path(value["path"]).suffix: value for value in answer.data if isinstance(value, dict) and "path" in value}
    audio, subtitles, status = files[".wav"], files[".srt"], answer.data[-1]
    assert audio["path"].startswith("outputs/.gradio/uploads/") and audio["path"].endswith(".wav")
    assert httpx.get(audio["url"], timeout=30).content[:4] == b"RIFF"
    assert "How are you?" in httpx.get(subtitles["url"], timeout=30).text
    assert str(app.cwd.parents[1]) not in str(answer.data) and "seed" in status


def test_only_the_outputs_folder_is_served(app: ServedApp) -> None:
    secret = app.cwd.parents[1] / "data" / "secret.txt"  # beside the outputs folder
    secret.write_text("top secret")
    (app.cwd / "notes.txt").write_text("the working directory is not served either")
    names = ["outputs/../secret.txt", "outputs/../../data/secret.txt", str(secret), "notes.txt", str(app.cwd)]
    for name in names:
        response = httpx.get(f"{app.url}/gradio_api/file={urllib.parse.quote(name, safe='')}", timeout=30)
        assert response.status_code in (403, 404), name
        assert b"top secret" not in response.content and b"not served either" not in response.content


def refused_as_not_received(answer: Answer) -> None:
    assert answer.event == "error", answer
    assert_one_sentence(answer.sentence)
    assert answer.sentence == NOT_RECEIVED


def test_a_file_the_server_never_received_is_refused_before_it_is_read(app: ServedApp, tmp_path: Path) -> None:
    """A planted clip in the system temp folder (outside the outputs and upload folders), a file that is no audio at
    all, and a URL: each is refused in the one sentence, and none of them is copied into the served upload folder."""
    planted = tmp_path / "planted.wav"
    planted.write_bytes(voice_clip(hz=140.0))
    notes = tmp_path / "planted-notes.txt"
    notes.write_text("a file that is not audio at all, which Gradio must never copy to be served")
    for path in (planted, notes, "http://127.0.0.1:9/voice.wav", "no/such/clip.wav"):
        refused_as_not_received(app.call("clone", [file_value(path), "", "Hi.", *SPEAK[1:]]))
    refused_as_not_received(app.call("voice_save", ["Planted", file_value(planted), ""]))
    uploads = outputs_of(app) / ".gradio" / "uploads"
    copied = [p for p in uploads.rglob("*") if p.is_file() and p.name.startswith("planted")]
    assert copied == []
    assert not (outputs_of(app) / "voices").exists() or not list((outputs_of(app) / "voices").glob("*.json"))
