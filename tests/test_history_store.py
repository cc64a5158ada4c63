"""History folder: what a user sees after generating, restarting, deleting, and when the disk misbehaves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from voicelab.engine.messages import SynthesisRequest, SynthesisResult
from voicelab.errors import StorageError
from voicelab.history import History
from voicelab.instruct.style import Emotion, Style
from voicelab.voice.prompt import PromptAudio

SR = 16000


def make_pair(text: str = "Hello there.", seconds: float = 0.5, job_id: str = "0123456789ab", prompt: bool = False):
    t = np.arange(int(seconds * SR)) / SR
    audio = (0.5 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    style = Style(speed=1.2, emotion=Emotion.HAPPY)
    prompt_audio = PromptAudio(audio, SR, "f" * 64, transcript="What the clip says.") if prompt else None
    request = SynthesisRequest(
        text=text,
        speed=1.25,
        options={"noise_scale": 0.5, "noise_w": 0.7},
        seed=None,
        style=style,
        instruction="cheerful",
        prompt=prompt_audio,
        job_id=job_id,
    )
    result = SynthesisResult(
        job_id=job_id,
        audio=audio,
        sample_rate=SR,
        latency_s=0.05,
        backend="tone",
        device="cpu",
        dtype="float32",
        style=style,
        seed=1234,
    )
    return request, result


def test_saved_generation_is_listed_playable_and_described(tmp_path: Path) -> None:
    history = History(tmp_path / "history")
    request, result = make_pair(prompt=True)
    entry = history.save(request, result, kind="clone")

    audio, sr = sf.read(entry.audio_path)
    assert sr == SR and len(audio) == len(result.audio)
    assert np.max(np.abs(audio - result.audio)) < 1e-3  # 16-bit PCM of the same waveform
    listed = history.entries()
    assert [e.entry_id for e in listed] == [entry.entry_id]
    got = listed[0]
    assert got.text == "Hello there." and got.instruction == "cheerful" and got.kind == "clone"
    assert got.style == {"speed": 1.2, "emotion": "happy"}
    assert got.prompt_sha256 == "f" * 64 and got.prompt_transcript == "What the clip says."
    assert got.backend == "tone"
    assert got.settings["seed"] == 1234 and got.settings["speed"] == 1.25
    assert got.settings["options"] == {"noise_scale": 0.5, "noise_w": 0.7}
    assert got.metrics["duration_s"] == pytest.approx(0.5)
    assert got.duration_s == pytest.approx(0.5)


def test_history_survives_a_restart_and_lists_newest_first(tmp_path: Path) -> None:
    first = History(tmp_path)
    first.save(*make_pair("one", job_id="aaaaaaaaaaa1"))
    time.sleep(1.05)  # ids carry the second; the newer one must sort first
    first.save(*make_pair("two", job_id="aaaaaaaaaaa2"))
    reopened = History(tmp_path)
    assert [e.text for e in reopened.entries()] == ["two", "one"]
    assert [e.text for e in reopened.entries(limit=1)] == ["two"]


def test_two_generations_in_the_same_second_are_listed_newest_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An id names its second, then a random job id: within one second the job ids used to decide the order (the
    Clone style test read the plain clone as the newest entry about one run in ten)."""
    history = History(tmp_path)
    second = time.mktime((2020, 1, 2, 8, 15, 0, 0, 0, -1))  # the past: the last entry is saved now
    for offset, job_id, text in ((0.1, "ffffffffffff", "First."), (0.6, "000000000000", "Second.")):
        monkeypatch.setattr(time, "time", lambda offset=offset: second + offset)
        history.save(*make_pair(text, job_id=job_id))
    monkeypatch.undo()
    assert [e.text for e in history.entries()] == ["Second.", "First."]
    assert [e.text for e in history.entries(limit=1)] == ["Second."]
    history.save(*make_pair("Now.", job_id="888888888888"))
    assert [e.text for e in history.entries(limit=2)] == ["Now.", "Second."]


def test_delete_removes_both_files(tmp_path: Path) -> None:
    history = History(tmp_path)
    entry = history.save(*make_pair())
    history.delete(entry.entry_id)
    assert history.entries() == []
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(StorageError, match="no longer exists"):
        history.get(entry.entry_id)


@pytest.mark.parametrize(
    "bad_id",
    ["../outside", "/etc/passwd", "..", "20240101-000000-0123456789ab/../../x", "20240101-000000-0123456789aB", ""],
)
def test_ids_that_could_escape_are_refused(tmp_path: Path, bad_id: str) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    history = History(tmp_path / "history")
    history.save(*make_pair())
    with pytest.raises(StorageError, match="not a history entry id"):
        history.get(bad_id)
    with pytest.raises(StorageError, match="not a history entry id"):
        history.delete(bad_id)
    assert outside.exists()


def test_symlinked_entry_pointing_outside_is_refused_and_not_listed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"id": "x"}))
    secret_wav = tmp_path / "secret.wav"
    secret_wav.write_bytes(b"RIFF")
    root = tmp_path / "history"
    root.mkdir()
    entry_id = "20240101-000000-0123456789ab"
    (root / f"{entry_id}.json").symlink_to(secret)
    (root / f"{entry_id}.wav").symlink_to(secret_wav)
    history = History(root)
    assert history.entries() == []
    with pytest.raises(StorageError, match="outside the history folder"):
        history.get(entry_id)
    with pytest.raises(StorageError, match="outside the history folder"):
        history.delete(entry_id)
    assert secret.exists() and secret_wav.exists()


def test_half_written_entries_are_never_listed_and_are_swept(tmp_path: Path) -> None:
    history = History(tmp_path)
    good = history.save(*make_pair())
    orphan = tmp_path / "20240101-000000-0123456789ab.wav"  # crash after the WAV, before the sidecar
    orphan.write_bytes(b"RIFF")
    temp = tmp_path / ".abc.tmp"  # crash mid-write
    temp.write_bytes(b"partial")
    damaged = tmp_path / "20240101-000001-0123456789ac.json"
    damaged.write_text("{not json")
    damaged.with_suffix(".wav").write_bytes(b"RIFF")
    assert [e.entry_id for e in history.entries()] == [good.entry_id]
    assert history.sweep(max_age_s=3600) == 0  # fresh leftovers may belong to a write in progress
    old = time.time() - 7200
    for path in (orphan, temp):
        os.utime(path, (old, old))
    assert history.sweep(max_age_s=3600) == 2
    assert not orphan.exists() and not temp.exists() and good.audio_path.exists()


def test_unwritable_outputs_folder_gives_a_clear_sentence(tmp_path: Path) -> None:
    blocker = tmp_path / "outputs"
    blocker.write_text("a file where the folder should be")
    history = History(blocker / "history")
    with pytest.raises(StorageError) as caught:
        history.save(*make_pair())
    message = str(caught.value)
    assert message.startswith("The audio was generated but could not be saved to the history folder")
    assert "Not a directory" in message or "File exists" in message
    assert history.entries() == []


FULL_DISK_SCRIPT = """
import resource, signal, sys
sys.path.insert(0, sys.argv[2])
from tests.test_history_store import make_pair
from voicelab.errors import StorageError
from voicelab.history import History
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG, like a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
history = History(sys.argv[1])
try:
    history.save(*make_pair(seconds=2.0))
except StorageError as exc:
    print("STORAGE:", exc)
print("LISTED:", len(history.entries()))
"""


def test_full_disk_gives_a_clear_sentence_and_no_half_entry(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", FULL_DISK_SCRIPT, str(tmp_path), str(repo)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "STORAGE: The audio was generated but could not be saved" in out
    assert "File too large" in out
    assert "LISTED: 0" in out
    assert [p.name for p in tmp_path.iterdir()] == []  # neither the partial WAV nor its temp file stays
