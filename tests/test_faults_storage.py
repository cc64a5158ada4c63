"""The outputs folder unwritable or full: a clear sentence, and the generation still returns its audio.

History saving is best effort: ``voicelab.history`` raises StorageError, and the Generate handler returns the
audio anyway with the reason in its status line. Checked at the handler (a full disk simulated by making
fsync fail with ENOSPC) and through the whole app started with an outputs folder that cannot exist.
"""

from __future__ import annotations

import errno
import os
import resource
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from gradio_client import Client
from gradio_client.exceptions import AppError

from tests.fixture_backends import SECONDS_PER_CHAR
from tests.studio_helpers import make_studio, speak
from voicelab.bench.load import audio_path
from voicelab.bench.studio import AppProcess, panel_html
from voicelab.engine.client import EngineClient
from voicelab.errors import StorageError
from voicelab.history import History
from voicelab.settings import Settings
from voicelab.studio import GenerationRequest
from voicelab.ui.handlers import write_playable
from voicelab.ui.serving import configure_environment, launch_options, serving_paths

TONE = "tests.fixture_backends:ToneBackend"
SPEAK = (1.0, 0.667, 0.8, 0.2, 11)  # speed, noise scale, noise w, silence, seed


@pytest.fixture(scope="module")
def engine() -> Iterator[EngineClient]:
    with EngineClient(Settings(backend=TONE, device="cpu", job_timeout_s=60.0)) as client:
        client.wait_ready()
        yield client


def _disk_full(*_: Any) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_full_disk_returns_the_audio_and_says_why(
    engine: EngineClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    history = History(tmp_path / "history")
    studio = make_studio(engine, history)
    monkeypatch.setattr(f"voicelab.history.os.{failing}", _disk_full)
    with pytest.warns(UserWarning, match="could not be saved"):
        audio, meta = speak(studio, "Kept in memory only.", *SPEAK)
    assert isinstance(audio, tuple), "the audio comes back even though it could not be saved"
    rate, samples = audio
    assert len(samples) / rate == pytest.approx(len("Kept in memory only.") * SECONDS_PER_CHAR, abs=0.01)
    assert np.isfinite(samples).all() and np.max(np.abs(samples)) > 0.1
    reason = next(line for line in meta.splitlines() if "could not be saved" in line)
    assert "(No space left on device)." in reason and "Errno" not in reason and "Traceback" not in reason
    assert history.entries() == [] and list(history.root.iterdir()) == [], "no half entry and no temp file"
    monkeypatch.undo()
    saved, _ = speak(studio, "Space again.", *SPEAK)
    assert isinstance(saved, str) and Path(saved).parent == history.root and len(history.entries()) == 1


@pytest.fixture
def app_without_outputs(tmp_path: Path) -> Iterator[AppProcess]:
    """The app told to keep its outputs inside a regular file, where no folder can ever be made."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the outputs folder should be", encoding="utf-8")
    app = AppProcess(["--outputs-dir", str(blocker / "outputs"), "--backend", TONE, "--device", "cpu"])
    try:
        yield app
    finally:
        app.stop()


# Gradio's temp folder normally lives inside the outputs folder; when that folder cannot be made, serving moves
# Gradio to a private temporary folder, so the unsaved audio can still be written there and played.
def test_app_with_an_unwritable_outputs_folder_still_speaks(app_without_outputs: AppProcess) -> None:
    app = app_without_outputs
    assert "engine" in panel_html(app.url)
    client = Client(app.url, verbose=False, download_files=False)
    try:
        audio, _subtitles, meta = client.predict("Nowhere to keep this.", *SPEAK, api_name="/speak")
    finally:
        client.close()
    assert audio_path(audio).endswith(".wav")
    assert "could not be saved to the history folder" in meta and "Not a directory" in meta
    assert app.process.poll() is None


def _limit_file_size() -> None:
    """In the app's process: writes past 8 KiB fail with EFBIG, as on a full disk (instead of a SIGXFSZ kill)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))


@pytest.fixture
def app_on_full_disk(tmp_path: Path) -> Iterator[AppProcess]:
    app = AppProcess(
        ["--outputs-dir", str(tmp_path / "outputs"), "--backend", TONE, "--device", "cpu"], preexec=_limit_file_size
    )
    try:
        yield app
    finally:
        app.stop()


# On a full disk nothing can be written, not even the WAV Gradio would serve: the handler writes that WAV itself
# and answers with one clear sentence instead of Gradio's postprocess error with an Errno and a path.
def test_app_on_a_full_disk_answers_with_audio_or_one_sentence(app_on_full_disk: AppProcess) -> None:
    client = Client(app_on_full_disk.url, verbose=False, download_files=False)
    try:
        audio, _subtitles, meta = client.predict(
            "A rather longer sentence that will not fit on this disk.", *SPEAK, api_name="/speak"
        )
    except AppError as exc:
        message = exc.message
        assert len(message) < 200 and "Errno" not in message and message.endswith("."), message
    else:
        assert audio_path(audio).endswith(".wav") and "could not be saved" in meta
    finally:
        client.close()
    assert app_on_full_disk.process.poll() is None


def test_unsaved_audio_is_written_into_gradios_cache(
    engine: EngineClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "gradio"
    studio = make_studio(engine, History(tmp_path / "history"), cache_dir=cache)
    monkeypatch.setattr("voicelab.history.os.fsync", _disk_full)
    with pytest.warns(UserWarning, match="could not be saved"):
        audio, _ = speak(studio, "Played from the cache.", *SPEAK)
    assert isinstance(audio, str) and Path(audio).is_relative_to(cache) and audio.endswith(".wav")
    samples, rate = sf.read(audio)
    assert len(samples) / rate == pytest.approx(len("Played from the cache.") * SECONDS_PER_CHAR, abs=0.01)
    monkeypatch.undo()
    blocked = tmp_path / "blocked"
    blocked.write_text("not a folder", encoding="utf-8")
    result = studio.service.generate(GenerationRequest(text="Nowhere.")).first.result
    with pytest.raises(StorageError, match=r"^The audio could not be saved or played \(Not a directory\)\.$"):
        write_playable(result, blocked / "cache")


def test_an_unwritable_outputs_folder_moves_only_gradios_temp_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file", encoding="utf-8")
    settings = Settings(backend=TONE, outputs_dir=str(blocker / "outputs"))
    for name in ("GRADIO_TEMP_DIR", "GRADIO_EXAMPLES_CACHE", "GRADIO_ANALYTICS_ENABLED"):
        monkeypatch.delenv(name, raising=False)
    paths = configure_environment(settings)
    assert os.environ["GRADIO_TEMP_DIR"] == str(paths.gradio_temp) and paths.gradio_temp.is_dir()
    assert paths.gradio_temp.parent.name.startswith("voicelab-gradio-") and not paths.gradio_temp.is_relative_to(
        blocker
    )
    assert "not saved" in paths.notice and "Not a directory" in paths.notice
    assert launch_options(settings)["allowed_paths"] == [str(serving_paths(settings).history)]
    shutil.rmtree(paths.gradio_temp.parent)
