"""Every reported API edge, against the real app over HTTP: one sentence each, nothing of one user
shown to another, no server path shown, and no traceback in the server's log.

One app serves the module (tone backend, three logins: ann and bob are users, root sees all History).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api_server import voice_clip
from tests.served_app import Answer, ServedApp, assert_one_sentence, served_app
from voicelab.keys import ApiKeys

USERS = {"ann": "pw-ann", "bob": "pw-bob", "root": "pw-root"}
SPEAK = ["Hello there.", 1.0, 0.667, 0.8, 0.2, -1, "auto"]  # text, speed, noise_scale, noise_w, silence, seed, language
DESIGN = ["Hello there.", 1, "", "", None, None, None, None, None, None, None]
NAN, INF = float("nan"), float("inf")
FILE_META = {"_type": "gradio.FileData"}
NOT_RECEIVED = "The voice prompt must be a file uploaded to this server first (POST /gradio_api/upload), or null."


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApp]:
    auth = ",".join(f"{user}:{password}" for user, password in USERS.items())
    with served_app(tmp_path_factory.mktemp("edges"), "--auth", auth, "--history-admins", "root") as served:
        yield served


@pytest.fixture(scope="module")
def ann(app: ServedApp) -> httpx.Client:
    return app.login("ann", USERS["ann"])


def with_(data: list[object], index: int, value: object) -> list[object]:
    return [*data[:index], value, *data[index + 1 :]]


def refused(answer: Answer, words: str) -> None:
    assert answer.event == "error", answer
    assert_one_sentence(answer.sentence)
    assert words.lower() in answer.sentence.lower(), answer.sentence


REFUSALS = [
    ("speak", with_(SPEAK, 1, "abc"), "speed must be a number"),
    ("speak", with_(SPEAK, 1, NAN), "speed must be a number"),
    ("speak", with_(SPEAK, 1, INF), "speed must be a number"),
    ("speak", with_(SPEAK, 1, [1]), "speed must be a number"),
    ("speak", with_(SPEAK, 1, {"x": 1}), "speed must be a number"),
    ("speak", with_(SPEAK, 5, "abc"), "seed must be a whole number"),
    ("speak", with_(SPEAK, 5, NAN), "seed must be a whole number"),
    ("speak", with_(SPEAK, 5, INF), "seed must be a whole number"),
    ("speak", with_(SPEAK, 5, 2.5), "seed must be a whole number"),
    ("speak", with_(SPEAK, 0, [1]), "must be plain text"),
    ("speak", with_(SPEAK, 0, {"x": 1}), "must be plain text"),
    ("speak", with_(SPEAK, 0, 12), "must be plain text"),
    ("speak", with_(SPEAK, 0, None), "type some text"),
    ("speak", with_(SPEAK, 4, -1), "silence between sentences"),
    ("speak", with_(SPEAK, 2, "loud"), "noise scale"),
    ("speak", SPEAK[:3], "/speak takes 7 values (text, speed, noise_scale, noise_w, silence_s, seed, language)"),
    ("design", with_(DESIGN, 1, NAN), "takes must be a whole number"),
    ("design", with_(DESIGN, 1, None), "takes must be a whole number"),
    ("design", with_(DESIGN, 1, "3.5"), "takes must be a whole number"),
    ("design", with_(DESIGN, 1, 9), "takes must be a whole number from 1 to 4"),
    ("design", with_(DESIGN, 4, [1]), "age must be plain text"),
    ("design", with_(DESIGN, 5, "robot"), "unknown gender choice"),
    ("design", with_(DESIGN, 3, {"x": 1}), "style instruction must be plain text"),
    ("design", with_(DESIGN, 3, "slowly " * 400), "the limit is 2,000"),
    ("clone", [None, "", "Hi.", *SPEAK[1:]], "upload or record a voice prompt"),
    ("clone", ["abc", "", "Hi.", *SPEAK[1:]], "must be a file uploaded to this server"),
    ("clone", [{"path": "/etc/passwd", "meta": {"_type": "gradio.FileData"}}, "", "Hi.", *SPEAK[1:]], "upload"),
    ("clone", [{"path": "file:/etc/passwd", "meta": {"_type": "gradio.FileData"}}, "", "Hi.", *SPEAK[1:]], "file"),
    ("clone", [{"path": "https://example.com/v.wav", "meta": FILE_META}, "", "Hi.", *SPEAK[1:]], NOT_RECEIVED),
    ("clone", [{"path": "no/such/voice.wav", "meta": FILE_META}, "", "Hi.", *SPEAK[1:]], NOT_RECEIVED),
    ("clone", [{"path": "/etc/passwd"}, "", "Hi.", *SPEAK[1:]], "The voice prompt must be a file uploaded"),
    ("voice_save", ["me", {"path": "/etc/passwd"}, ""], "The voice prompt must be a file uploaded"),
    ("clone", [None, "x"], "/clone takes 17 values (prompt, transcript, text"),
    ("soft_restart", ["yes"], "force must be true or false"),
    ("soft_restart", [1], "force must be true or false"),
    ("soft_restart", [None], "force must be true or false"),
    ("soft_restart", [], "/soft_restart takes 1 values (force)"),
    ("clean_cache", ["yes"], "also clear speaker profiles must be true or false"),
    ("clean_cache", ["on"], "must be true or false"),
    ("history_show", [[1]], "entry id must be plain text"),
    ("history_show", ["../../etc/passwd"], "not a history entry id"),
    ("history_delete", [None], "pick an entry to delete first"),
    ("voice_save", ["me", None, ""], "upload or record a voice prompt"),
    ("voice_delete", [{"x": 1}], "saved voice must be plain text"),
]


@pytest.mark.parametrize(("endpoint", "data", "words"), REFUSALS, ids=lambda v: str(v)[:40])
def test_a_wrong_value_is_refused_in_one_sentence(
    app: ServedApp, ann: httpx.Client, endpoint: str, data: list[object], words: str
) -> None:
    refused(app.call(endpoint, data, ann), words)


def test_numbers_as_strings_are_coerced_and_missing_trailing_values_take_defaults(
    app: ServedApp, ann: httpx.Client
) -> None:
    spoken = app.call("speak", with_(with_(SPEAK, 1, "1.5"), 5, "7"), ann)
    assert spoken.event == "complete" and "seed 7" in spoken.data[-1]
    assert app.call("speak", SPEAK[:6], ann).event == "complete"  # the language defaults to auto
    design = app.call("design", with_(DESIGN, 1, "3")[:4], ann)  # the seven dropdowns default to unspecified
    assert design.event == "complete" and design.data[-2].count("take ") == 3


def test_booleans_take_only_true_false_and_false_never_forces(app: ServedApp, ann: httpx.Client) -> None:
    report = app.call("soft_restart", ["false"], ann, timeout=180)
    assert report.event == "complete" and "(after the job in flight)" in report.data[0], report
    cleaned = app.call("clean_cache", ["false"], ann)
    assert cleaned.event == "complete"
    refused(app.call("clean_cache", ["yes"], ann), "true or false")


def test_the_transcript_and_texts_are_bounded(app: ServedApp, ann: httpx.Client, tmp_path: Path) -> None:
    clip = tmp_path / "prompt.wav"
    clip.write_bytes(voice_clip())
    uploaded = ann.post("/gradio_api/upload", files={"files": ("prompt.wav", clip.read_bytes())}).json()[0]
    prompt = {"path": uploaded, "meta": {"_type": "gradio.FileData"}}
    refused(app.call("clone", [prompt, "x" * 2_000_000, "Hi.", *SPEAK[1:]], ann), "the limit is 1,000")
    refused(app.call("speak", with_(SPEAK, 0, "word " * 5000), ann), "the limit is 5,000")
    cloned = app.call("clone", [prompt, "A short transcript.", "Hi.", *SPEAK[1:]], ann)
    assert cloned.event == "complete", cloned


def test_unknown_endpoints_and_nameless_uploads_are_4xx(app: ServedApp, ann: httpx.Client) -> None:
    unknown = app.call("no_such_endpoint", [], ann)
    assert unknown.status == 404 and "no such endpoint" in unknown.sentence
    assert_one_sentence(unknown.sentence)
    joined = ann.post("/gradio_api/queue/join", json={"data": [], "fn_index": 9999, "session_hash": "abc"})
    assert joined.status_code == 404
    nameless = ann.post("/gradio_api/upload", files={"files": ("", b"abc")})
    assert nameless.status_code == 400 and "file name" in nameless.json()["error"]
    raw = b'--x\r\nContent-Disposition: form-data; name="files"\r\n\r\nabc\r\n--x--\r\n'
    field = ann.post("/gradio_api/upload", content=raw, headers={"content-type": "multipart/form-data; boundary=x"})
    assert field.status_code == 400
    assert_one_sentence(field.json()["error"])


def _speak_and_find(app: ServedApp, client: httpx.Client, text: str) -> tuple[str, str]:
    """(the History id, the served cache path) of one Speak generation."""
    answer = app.call("speak", with_(SPEAK, 0, text), client)
    assert answer.event == "complete", answer
    path = answer.data[0]["path"]
    entry_id = re.search(r"(\d{8}-\d{6}-[0-9a-f]{12})\.wav$", path)
    assert entry_id is not None, path
    return entry_id.group(1), path


def test_history_works_by_id_and_delete_removes_every_cached_copy(app: ServedApp, ann: httpx.Client) -> None:
    entry_id, served = _speak_and_find(app, ann, "Keep me for a moment.")
    assert ann.get(f"/gradio_api/file={served}").status_code == 200
    fresh = app.login("ann", USERS["ann"])  # a new browser session that never listed History
    shown = app.call("history_show", [entry_id], fresh)
    assert shown.event == "complete" and entry_id in shown.data[2]
    deleted = app.call("history_delete", [entry_id], fresh)
    assert deleted.event == "complete" and entry_id not in str(deleted.data[1])
    assert ann.get(f"/gradio_api/file={served}").status_code in (403, 404)
    left = [p for p in (app.cwd / "outputs").rglob("*") if entry_id in p.name or entry_id[-12:] in p.name]
    assert left == []
    refused(app.call("history_show", [entry_id], fresh), "no longer exists")


def test_no_absolute_server_path_is_shown(app: ServedApp, ann: httpx.Client) -> None:
    secret = str(app.cwd.resolve())
    _speak_and_find(app, ann, "Where do I live?")
    seen = [ann.get("/").text, ann.get("/config").text, str(app.call("history_list", [""], ann).data)]
    seen.append(str(app.call("speak", SPEAK, ann).data))
    bad = {"path": f"file:{secret}/../../etc/passwd", "meta": {"_type": "gradio.FileData"}}
    seen.append(app.call("clone", [bad, "", "Hi.", *SPEAK[1:]], ann).sentence)
    for text in seen:
        assert secret not in text
    listed = app.call("history_list", [""], ann).data
    assert "in `outputs/history`" in listed[0] and listed[3]["path"].startswith("outputs/.gradio/uploads/")


def test_each_login_sees_only_its_own_history_and_the_admin_sees_all(app: ServedApp, ann: httpx.Client) -> None:
    bob, root = app.login("bob", USERS["bob"]), app.login("root", USERS["root"])
    entry_id, _ = _speak_and_find(app, ann, "Ann's private words.")
    assert entry_id in str(app.call("history_list", [""], ann).data)
    assert entry_id not in str(app.call("history_list", [""], bob).data)
    refused(app.call("history_show", [entry_id], bob), "no longer exists")
    refused(app.call("history_delete", [entry_id], bob), "no longer exists")
    assert entry_id in str(app.call("history_list", [""], root).data)
    assert (app.cwd / "outputs" / "history" / f"{entry_id}.json").is_file()
    assert '"owner": "ann"' in (app.cwd / "outputs" / "history" / f"{entry_id}.json").read_text()


def test_the_history_filter_matches_words(app: ServedApp, ann: httpx.Client) -> None:
    entry_id, _ = _speak_and_find(app, ann, "Purple elephants dance.")
    assert entry_id in str(app.call("history_list", ["purple DANCE"], ann).data)
    assert entry_id not in str(app.call("history_list", ["purple zebra"], ann).data)
    refused(app.call("history_list", [[1]], ann), "filter must be plain text")


def test_the_http_api_shares_the_strict_booleans(app: ServedApp) -> None:
    key = {"X-API-Key": ApiKeys(app.cwd / "outputs" / "api-keys.json").add("bob").key}
    cleaned = httpx.post(f"{app.url}/v1/memory/clean", json={"clear_profiles": "yes"}, headers=key, timeout=30)
    assert cleaned.status_code == 400
    message = cleaned.json()["error"]["message"]
    assert "must be true or false" in message
    assert_one_sentence(message)
    restart = httpx.post(f"{app.url}/v1/engine/restart", json={"force": 1}, headers=key, timeout=30)
    assert restart.status_code == 400 and "must be true or false" in restart.json()["error"]["message"]
    speech = httpx.post(f"{app.url}/v1/audio/speech", json={"input": "Hi.", "speed": "fast"}, headers=key)
    assert speech.status_code == 400 and "Speed must be a number" in speech.json()["error"]["message"]


def test_gradio_client_calls_endpoints_by_parameter_name(app: ServedApp) -> None:
    """/design's controls are named (age, gender, …), not param_3…param_9, and keywords reach them."""
    from gradio_client import Client

    client = Client(app.url + "/", auth=("ann", USERS["ann"]), verbose=False)
    names = [p["parameter_name"] for p in client.view_api(print_info=False, return_format="dict")
             ["named_endpoints"]["/design"]["parameters"]]  # fmt: skip
    assert names[4:] == ["age", "gender", "pitch", "pitch_variation", "volume", "speed", "emotion"]
    outputs = client.predict(text="Named at last.", takes=1, instruction="", speed="very slow", api_name="/design")
    assert "take 1:" in outputs[-2] and "speed" in outputs[-1]


def test_a_login_may_name_only_files_it_sent_or_history_it_sees(
    app: ServedApp, ann: httpx.Client, tmp_path: Path
) -> None:
    """A clip planted in the system temp folder is never read; a History entry's audio is, by the login that sees it
    (and the admin), never by another login."""
    planted = tmp_path / "planted.wav"
    planted.write_bytes(voice_clip(hz=140.0))
    as_prompt = {"path": str(planted), "meta": FILE_META}
    refused(app.call("clone", [as_prompt, "", "Hi.", *SPEAK[1:]], ann), NOT_RECEIVED)
    words = "A generation long enough to serve as a voice prompt for the next one, if its owner asks for that."
    entry_id, _ = _speak_and_find(app, ann, words)
    own = {"path": f"outputs/history/{entry_id}.wav", "meta": FILE_META}
    bob, root = app.login("bob", USERS["bob"]), app.login("root", USERS["root"])
    refused(app.call("clone", [own, "", "Hi.", *SPEAK[1:]], bob), NOT_RECEIVED)
    assert app.call("clone", [own, words, "Hi.", *SPEAK[1:]], ann).event == "complete"
    assert app.call("clone", [own, words, "Hi.", *SPEAK[1:]], root).event == "complete"
    uploads = app.cwd / "outputs" / ".gradio" / "uploads"
    assert [p for p in uploads.rglob("planted*")] == []
