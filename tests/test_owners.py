"""Two logins on one studio (``--auth user1:pw1,user2:pw2``, root an admin): each lists, plays, downloads, uses and
deletes only what it made (saved voices, History entries and their files, cached results, uploads), through the
page's own HTTP calls (``/gradio_api/...``), ``gradio_client`` and the ``openai`` client; the API takes each
login's keys, never a password; and each refusal is one sentence in its route's shape.

One app serves the module (app.py in a child process, tone backend); its key file is made with the CLI before it
starts, as a user would.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.api_server import TONE, voice_clip
from tests.served_app import Answer, ServedApp, assert_one_sentence, served_app
from tests.test_history_store import make_pair
from voicelab import cli
from voicelab.history import History
from voicelab.voices import VoiceStore

PASSWORDS = {"user1": "pw1", "user2": "pw2", "root": "pw-root"}
SPEAK = ["Hello there.", 1.0, 0.667, 0.8, 0.2, -1, "auto"]  # text, speed, noise_scale, noise_w, silence, seed, language
DESIGN = ["Hello there.", 1, "", ""]  # text, takes, voice id, instruction (the dropdowns take their defaults)
FILE_META = {"_type": "gradio.FileData"}
NOT_RECEIVED = "The voice prompt must be a file uploaded to this server first (POST /gradio_api/upload), or null."
ENTRY = re.compile(r"\d{8}-\d{6}-[0-9a-f]{12}")


@dataclass(frozen=True)
class Studio:
    app: ServedApp
    keys: dict[str, str]  # login -> its API key, as `keys add` printed it
    pages: dict[str, httpx.Client]  # login -> an HTTP client logged in through the login form

    @property
    def outputs(self) -> Path:
        return self.app.cwd / "outputs"

    def key_file(self) -> Path:
        return self.outputs / "api-keys.json"


def keys_cli(*args: str) -> str:
    """``python -m voicelab keys ...`` in this process; what it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(["keys", *args]) == 0
    return printed.getvalue()


def key_of(printed: str) -> str:
    return printed.strip().splitlines()[-1]


@dataclass(frozen=True)
class Legacy:
    voice_id: str
    entry_id: str


def without_owner(sidecar: Path) -> None:
    data = json.loads(sidecar.read_text())
    data.pop("owner")
    sidecar.write_text(json.dumps(data))


def stored_before_owners(outputs: Path) -> Legacy:
    """A saved voice and a History entry as they were written before either had an owner."""
    voice = VoiceStore(outputs / "voices").save("Legacy Voice", voice_clip(hz=200.0))
    entry = History(outputs / "history").save(*make_pair("Said before logins had their own.", job_id="00000000aaaa"))
    without_owner(outputs / "voices" / f"{voice.voice_id}.json")
    without_owner(outputs / "history" / f"{entry.entry_id}.json")
    return Legacy(voice.voice_id, entry.entry_id)


@pytest.fixture(scope="module")
def legacy(studio: Studio) -> Legacy:
    return stored_before_owners(studio.outputs)


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Studio]:
    cwd = tmp_path_factory.mktemp("owners")
    keys = {login: key_of(keys_cli("add", login, "--outputs-dir", str(cwd / "outputs"))) for login in PASSWORDS}
    auth = ",".join(f"{login}:{password}" for login, password in PASSWORDS.items())
    with served_app(cwd, "--auth", auth, "--admins", "root") as app:
        yield Studio(app, keys, {login: app.login(login, pw) for login, pw in PASSWORDS.items()})


def one_sentence(text: str) -> None:
    assert_one_sentence(text)
    assert not re.search(r"[.!?] [A-Z]", text), f"two sentences: {text!r}"


def refused(answer: Answer, words: str) -> None:
    assert answer.event == "error", answer
    one_sentence(answer.sentence)
    assert words.lower() in answer.sentence.lower(), answer.sentence


def api_refused(response: httpx.Response, status: int, words: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    one_sentence(error["message"])
    assert words.lower() in error["message"].lower(), error["message"]


def upload(page: httpx.Client, name: str = "prompt.wav", hz: float = 180.0) -> dict[str, Any]:
    [path] = page.post("/gradio_api/upload", files={"files": (name, voice_clip(hz=hz))}).json()
    return {"path": path, "meta": FILE_META}


def save_voice(studio: Studio, login: str, name: str) -> tuple[str, list[str]]:
    """(the new voice's id, the ids the answer lists) of a voice saved on the page by ``login``."""
    page = studio.pages[login]
    saved = studio.app.call("voice_save", [name, upload(page, f"{login}.wav"), ""], page)
    assert saved.event == "complete", saved
    listed = [voice_id for _, voice_id in saved.data[0]["choices"]]
    return saved.data[0]["value"], listed


def spoken(studio: Studio, login: str, text: str) -> tuple[str, str]:
    """(the History id, the served name of the cached result) of one /speak by ``login``."""
    answer = studio.app.call("speak", [text, *SPEAK[1:]], studio.pages[login])
    assert answer.event == "complete", answer
    served = answer.data[0]["path"]
    found = ENTRY.search(served)
    assert found is not None, served
    return found.group(0), served


def page_fn(studio: Studio, elem_id: str, trigger: str) -> int:
    """The function index of the page's ``trigger`` event whose only output is the component ``elem_id``."""
    config = studio.pages["user1"].get("/config").json()
    component = next(c["id"] for c in config["components"] if c.get("props", {}).get("elem_id") == elem_id)
    return next(
        d["id"]
        for d in config["dependencies"]
        if d["outputs"] == [component] and any(t[1] == trigger for t in d["targets"])
    )


def openai_client(studio: Studio, login: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{studio.app.url}/v1", api_key=studio.keys[login], max_retries=0)


def test_a_login_lists_uses_and_deletes_only_its_own_saved_voices_on_the_page(studio: Studio) -> None:
    app, pages = studio.app, studio.pages
    mine, listed = save_voice(studio, "user1", "User1 Voice")
    theirs, listed_for_user2 = save_voice(studio, "user2", "User1 Voice")  # names are unique per login
    assert mine in listed and theirs not in listed
    assert listed_for_user2 == [theirs]
    on_load = page_fn(studio, "voices-picker", "load")
    for login, own in (("user1", mine), ("user2", theirs)):
        shown = app.page_event(pages[login], on_load, [])
        assert shown.event == "complete", shown
        assert [voice_id for _, voice_id in shown.data[0]["choices"]] == [own]
    every = [voice_id for _, voice_id in app.page_event(pages["root"], on_load, []).data[0]["choices"]]
    assert {mine, theirs} <= set(every)  # the admin sees every login's voices
    refused(app.call("design", [*DESIGN[:2], mine, ""], pages["user2"]), "no saved voice")
    refused(app.call("voice_delete", [mine], pages["user2"]), "no saved voice")
    assert (studio.outputs / "voices" / f"{mine}.json").is_file()
    assert app.call("design", [*DESIGN[:2], mine, ""], pages["user1"]).event == "complete"


def test_gradio_client_of_another_login_cannot_use_or_delete_a_voice(studio: Studio, tmp_path: Path) -> None:
    from gradio_client import Client, handle_file
    from gradio_client.exceptions import AppError

    mine, _ = save_voice(studio, "user1", "Kept Voice")
    other = Client(studio.app.url + "/", auth=("user2", PASSWORDS["user2"]), verbose=False)
    owner = Client(studio.app.url + "/", auth=("user1", PASSWORDS["user1"]), verbose=False)
    try:
        with pytest.raises(AppError, match="no saved voice"):
            other.predict(text="Hi.", takes=1, voice_id=mine, instruction="", api_name="/design")
        with pytest.raises(AppError, match="no saved voice"):
            other.predict(voice_id=mine, api_name="/voice_delete")
        *takes, status, _style = owner.predict(text="Hi.", takes=1, voice_id=mine, instruction="", api_name="/design")
        assert Path(takes[0]).is_file() and "take 1:" in status  # its own result downloads with its login's cookie
        clip = tmp_path / "mine.wav"
        clip.write_bytes(voice_clip(hz=170.0))
        prompt = handle_file(str(clip))
        cloned, *_ = owner.predict(prompt=prompt, transcript="", text="Hi.", instruction="", api_name="/clone")
        assert Path(cloned).is_file()  # its own upload is its to use
    finally:
        other.close()
        owner.close()
    assert (studio.outputs / "voices" / f"{mine}.json").is_file()


def test_the_api_lists_fetches_uses_and_deletes_only_the_keys_logins_voices(studio: Studio) -> None:
    user1, user2 = openai_client(studio, "user1"), openai_client(studio, "user2")
    created = user1.audio.voices.create(
        name="Api Voice", audio_sample=("a.wav", voice_clip(), "audio/wav"), consent="-"
    )
    voice_id = created.id
    key2 = {"Authorization": f"Bearer {studio.keys['user2']}"}
    listed = httpx.get(f"{studio.app.url}/v1/audio/voices", headers=key2).json()["data"]
    assert voice_id not in [v["id"] for v in listed]
    api_refused(httpx.get(f"{studio.app.url}/v1/audio/voices/{voice_id}", headers=key2), 404, "no saved voice")
    with pytest.raises(openai.NotFoundError, match="no saved voice"):
        user2.audio.speech.create(model="tts-1", voice=voice_id, input="Hi.", response_format="wav")
    with pytest.raises(openai.NotFoundError, match="no saved voice"):
        user2.audio.voices.delete(voice_id)
    key1 = {"Authorization": f"Bearer {studio.keys['user1']}"}
    assert httpx.get(f"{studio.app.url}/v1/audio/voices/{voice_id}", headers=key1).status_code == 200
    audio = user1.audio.speech.create(model="tts-1", voice=voice_id, input="Hi.", response_format="wav")
    assert audio.content[:4] == b"RIFF"
    assert user1.audio.voices.delete(voice_id).deleted


def test_the_api_takes_a_logins_key_never_its_password_and_a_revoked_key_stops_at_once(studio: Studio) -> None:
    url = studio.app.url
    for password in PASSWORDS.values():
        api_refused(httpx.get(f"{url}/v1/audio/voices", headers={"X-API-Key": password}), 401, "not valid")
    api_refused(httpx.get(f"{url}/v1/audio/voices"), 401, "needs an API key")
    text = studio.key_file().read_text()
    assert all(key not in text for key in studio.keys.values()) and '"sha256"' in text  # kept hashed
    spare = keys_cli("add", "user2", "--outputs-dir", str(studio.outputs))
    spare_id, spare_key = re.search(r"key_[0-9a-f]{8}", spare).group(0), key_of(spare)  # type: ignore[union-attr]
    assert httpx.get(f"{url}/v1/audio/voices", headers={"X-API-Key": spare_key}).status_code == 200
    keys_cli("revoke", spare_id, "--outputs-dir", str(studio.outputs))
    api_refused(httpx.get(f"{url}/v1/audio/voices", headers={"X-API-Key": spare_key}), 401, "not valid")


def test_api_speech_is_saved_in_the_keys_logins_history(studio: Studio) -> None:
    made = openai_client(studio, "user1").audio.speech.with_raw_response.create(
        model="tts-1", voice="default", input="Said through the API by user one.", response_format="wav"
    )
    job = made.headers["X-Job-Id"]
    [sidecar] = (studio.outputs / "history").glob(f"*-{job}.json")
    assert json.loads(sidecar.read_text())["owner"] == "user1"
    assert sidecar.stem in str(studio.app.call("history_list", [""], studio.pages["user1"]).data)
    assert sidecar.stem not in str(studio.app.call("history_list", [""], studio.pages["user2"]).data)


def test_with_auth_and_no_key_file_the_api_says_how_to_make_one(tmp_path: Path) -> None:
    from voicelab.api.server import ServerThread, build_api
    from voicelab.bench.studio import free_port
    from voicelab.engine.client import EngineClient
    from voicelab.settings import Settings
    from voicelab.telemetry.host import HostSampler
    from voicelab.telemetry.nvml import NvmlSampler
    from voicelab.telemetry.sampler import TelemetrySampler
    from voicelab.telemetry.samples import EngineState

    outputs = tmp_path / "outputs"
    settings = Settings(backend=TONE, outputs_dir=str(outputs), auth="user1:pw1,user2:pw2", port=free_port())
    with pytest.MonkeyPatch.context() as env:
        for name in ("GRADIO_TEMP_DIR", "GRADIO_EXAMPLES_CACHE", "GRADIO_ANALYTICS_ENABLED"):
            env.delenv(name, raising=False)  # restored after the test; build_api sets them
        engine = EngineClient(settings, start=False)  # no worker: nothing here generates
        telemetry = TelemetrySampler(NvmlSampler(), HostSampler(), lambda: EngineState(0, None, None))
        server = ServerThread(build_api(engine, settings, telemetry)[0], "127.0.0.1", settings.port, quiet=True)
        try:
            server.start()
            url = f"http://127.0.0.1:{settings.port}"
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="pw1", max_retries=0)
            with pytest.raises(openai.AuthenticationError) as refusal:
                client.audio.voices.delete("voice_0123456789abcdef")
            message = refusal.value.body["message"]  # type: ignore[index]
            one_sentence(message)
            assert "python -m voicelab keys add LOGIN" in message
            key = key_of(keys_cli("add", "user1", "--outputs-dir", str(outputs)))
            listed = httpx.get(f"{url}/v1/audio/voices", headers={"Authorization": f"Bearer {key}"})
            assert listed.status_code == 200 and listed.json()["data"] == []
        finally:
            server.stop()
            engine.close()


def test_history_files_and_cached_results_are_served_only_to_their_login(studio: Studio) -> None:
    entry_id, cached = spoken(studio, "user1", "Private words of user one.")
    history = studio.outputs / "history"
    names = [cached, f"outputs/history/{entry_id}.json", f"outputs/history/{entry_id}.wav", f"{history}/{entry_id}.wav"]
    for name in names:
        route = f"/gradio_api/file={urllib.parse.quote(name, safe='/')}"
        assert studio.pages["user1"].get(route).status_code == 200, name
        theirs = studio.pages["user2"].get(route)
        assert theirs.status_code == 404 and b"Private words" not in theirs.content, name
        one_sentence(theirs.json()["error"])
    older_route = f"/gradio_api/file/{history}/{entry_id}.json"  # Gradio's older spelling of the file route
    assert studio.pages["user2"].get(older_route).status_code == 404
    assert studio.pages["user1"].get(older_route).status_code == 200
    admin = studio.pages["root"].get(f"/gradio_api/file=outputs/history/{entry_id}.json")
    assert admin.status_code == 200 and json.loads(admin.content)["owner"] == "user1"


def test_a_file_the_login_never_uploaded_is_refused_before_it_is_read(studio: Studio) -> None:
    """Another login's upload, its cached result and its saved voice's clip are each refused in the one sentence,
    and nothing of theirs is copied for the asker; the uploader's own upload is taken."""
    app, pages = studio.app, studio.pages
    theirs = upload(pages["user1"], "user1-only.wav", hz=150.0)
    _, cached = spoken(studio, "user1", "A result of user one, long enough to be a prompt for anyone who asks.")
    voice_id, _ = save_voice(studio, "user1", "Clip Of User1")
    assert (studio.outputs / "voices" / f"{voice_id}.wav").is_file()
    clone = ["", "Hi.", *SPEAK[1:]]
    for path in (theirs["path"], cached, f"outputs/voices/{voice_id}.wav"):
        refused(app.call("clone", [{"path": path, "meta": FILE_META}, *clone], pages["user2"]), NOT_RECEIVED)
    refused(app.call("voice_save", ["Taken", theirs, ""], pages["user2"]), NOT_RECEIVED)
    assert app.call("clone", [theirs, *clone], pages["user1"]).event == "complete"


def test_api_refusals_are_one_sentence_in_openais_shape(studio: Studio) -> None:
    key = {"Authorization": f"Bearer {studio.keys['user1']}"}
    url = studio.app.url
    for path in ("/v1/audio/voices/..%2F..%2Fetc%2Fpasswd", "/v1/audio/voices/a/b"):
        api_refused(httpx.get(url + path, headers=key), 404, "no saved voice")
    api_refused(httpx.get(f"{url}/v1/no/such/route", headers=key), 404, "no api route")
    api_refused(httpx.get(f"{url}/v1/audio/speech", headers=key), 405, "takes POST")
    speech = {"input": "Hi.", "voice": "nobody", "response_format": "wav"}
    api_refused(httpx.post(f"{url}/v1/audio/speech", json=speech, headers=key), 404, "no saved voice called 'nobody'")
    too_long = {"input": "x" * 6000, "response_format": "wav"}
    api_refused(httpx.post(f"{url}/v1/audio/speech", json=too_long, headers=key), 413, "the limit is 5,000")


def test_a_malformed_call_body_is_refused_in_the_studios_sentence(studio: Studio) -> None:
    page = studio.pages["user1"]
    for body in (b'{"data": 5}', b"not json at all", b'{"no_data": []}'):
        answer = page.post("/gradio_api/call/speak", content=body, headers={"content-type": "application/json"})
        assert answer.status_code == 422, answer.text
        one_sentence(answer.json()["error"])
        assert answer.json()["error"].startswith("/speak takes a JSON body")


def test_null_speed_takes_the_default_like_the_other_controls(studio: Studio) -> None:
    answer = studio.app.call("speak", ["Hello there.", None, None, None, None, None, "auto"], studio.pages["user1"])
    assert answer.event == "complete", answer
    key = {"Authorization": f"Bearer {studio.keys['user1']}"}
    body = {"input": "Hi.", "speed": None, "response_format": "wav"}
    assert httpx.post(f"{studio.app.url}/v1/audio/speech", json=body, headers=key, timeout=60).status_code == 200


def test_a_history_id_with_spaces_around_it_is_read_as_the_id(studio: Studio) -> None:
    entry_id, _ = spoken(studio, "user1", "Find me again.")
    for sent in (f"{entry_id}\n", f"  {entry_id} "):
        shown = studio.app.call("history_show", [sent], studio.pages["user1"])
        assert shown.event == "complete" and entry_id in shown.data[2], shown
    refused(studio.app.call("history_show", [f"{entry_id}\n"], studio.pages["user2"]), "no longer exists")


def test_what_was_stored_without_an_owner_belongs_to_the_admins(studio: Studio, legacy: Legacy) -> None:
    app, pages, url = studio.app, studio.pages, studio.app.url
    on_load = page_fn(studio, "voices-picker", "load")
    listed = {login: str(app.page_event(pages[login], on_load, []).data) for login in ("user1", "root")}
    assert legacy.voice_id not in listed["user1"] and legacy.voice_id in listed["root"]
    refused(app.call("design", [*DESIGN[:2], legacy.voice_id, ""], pages["user1"]), "no saved voice")
    assert app.call("design", [*DESIGN[:2], legacy.voice_id, ""], pages["root"]).event == "complete"
    for login, seen in (("user1", False), ("root", True)):
        key = {"Authorization": f"Bearer {studio.keys[login]}"}
        voices = httpx.get(f"{url}/v1/audio/voices", headers=key).json()["data"]
        assert (legacy.voice_id in [v["id"] for v in voices]) is seen
        assert (legacy.entry_id in str(app.call("history_list", [""], pages[login]).data)) is seen
        fetched = pages[login].get(f"/gradio_api/file=outputs/history/{legacy.entry_id}.wav")
        assert fetched.status_code == (200 if seen else 404)
