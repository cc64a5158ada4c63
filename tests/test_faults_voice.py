"""A missing or corrupt voice file: a clear BackendLoadError sentence, the process stays up, and it recovers.

Through the engine (the error crosses the process boundary from the worker) and through the whole app: the
page says what is wrong, Generate says it too, and once the file is put right the next Generate works
without restarting anything.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from tests.test_fuzz_inputs import assert_clear_sentence
from voicelab.backends.piper.backend import default_voice_paths
from voicelab.backends.registry import create_backend
from voicelab.bench.load import audio_path
from voicelab.bench.studio import AppProcess, panel_html
from voicelab.engine.client import EngineClient
from voicelab.engine.messages import SynthesisRequest
from voicelab.errors import BackendLoadError
from voicelab.settings import Settings

SPEAK = (1.0, 0.667, 0.8, 0.2, 7)  # speed, noise scale, noise w, silence, seed


@pytest.fixture
def voice_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "voices"
    folder.mkdir()
    return folder


def install(target: Path, model: bytes | None) -> None:
    """Put a voice at ``target``: the real config, and the real model (``None``) or the given bytes."""
    real_model, real_config = default_voice_paths()
    Path(f"{target}.json").write_bytes(real_config.read_bytes())
    if target.exists() or target.is_symlink():
        target.unlink()
    if model is None:
        target.symlink_to(real_model)
    else:
        target.write_bytes(model)


def truncated_model() -> bytes:
    with default_voice_paths()[0].open("rb") as handle:
        return handle.read(1 << 20)


def _engine(voice: Path) -> EngineClient:
    return EngineClient(Settings(device="cpu", torch_threads=1, voice_path=str(voice), job_timeout_s=120.0))


def _load_error(engine: EngineClient) -> BackendLoadError:
    with pytest.raises(BackendLoadError) as caught:
        engine.wait_ready(timeout=120)
    return caught.value


def test_missing_then_corrupt_voice_are_sentences_and_the_engine_stays_up(voice_dir: Path) -> None:
    """Each request after a failed load tries again, so the user learns what is wrong with the file now."""
    voice = voice_dir / "en_US-joe-medium.onnx"
    with _engine(voice) as engine:
        error = _load_error(engine)
        assert_clear_sentence(error)
        assert "does not exist" in str(error) and voice.name in str(error)
        status = engine.status()
        assert not status.ready and status.load_error == str(error) and status.worker_pid == 0
        with pytest.raises(BackendLoadError, match="does not exist"):
            engine.synthesize(SynthesisRequest("Hello?"), timeout=120)

        install(voice, truncated_model())
        with pytest.raises(BackendLoadError) as corrupt:
            engine.synthesize(SynthesisRequest("Hello again?"), timeout=120)
        message = str(corrupt.value)
        assert "corrupt" in message and message.endswith(".") and "\n" not in message and "Traceback" not in message
        assert engine.status().load_error == message, "the engine answers and keeps saying why"
        # Recovery once the real voice is installed is checked through the whole app below.


def _config_with(change: Callable[[dict[str, Any]], Any]) -> bytes:
    config = json.loads(default_voice_paths()[1].read_text(encoding="utf-8"))
    return json.dumps(change(config)).encode()


BROKEN_VOICES: dict[str, tuple[Callable[[], bytes | None], Callable[[], bytes | None], str]] = {
    # name: (model bytes, config bytes; None = leave it out), words the sentence must contain
    "truncated-model": (truncated_model, lambda: _config_with(lambda c: c), "corrupt"),
    "empty-model": (lambda: b"", lambda: _config_with(lambda c: c), "empty"),
    "random-model": (lambda: os.urandom(4096), lambda: _config_with(lambda c: c), "corrupt"),
    "missing-model": (lambda: None, lambda: _config_with(lambda c: c), "does not exist"),
    "missing-config": (truncated_model, lambda: None, "does not exist"),
    "config-not-json": (lambda: b"", lambda: b"{not json", "could not be read as JSON"),
    "config-without-espeak": (lambda: b"", lambda: _config_with(lambda c: c.pop("espeak") and c), "bad field"),
    "config-is-a-list": (lambda: b"", lambda: b"[1, 2, 3]", "voice config"),
}


def _broken_voice(folder: Path, name: str) -> Path:
    model, config, _ = BROKEN_VOICES[name]
    voice = folder / f"{name}.onnx"
    if (data := model()) is not None:
        voice.write_bytes(data)
    if (text := config()) is not None:
        Path(f"{voice}.json").write_bytes(text)
    return voice


@pytest.mark.parametrize("name", list(BROKEN_VOICES))
def test_broken_voice_files_give_a_sentence(voice_dir: Path, name: str) -> None:
    """The same loading code the worker runs, in-process: every broken file is a BackendLoadError sentence."""
    voice = _broken_voice(voice_dir, name)
    with pytest.raises(BackendLoadError) as caught:
        create_backend(Settings(backend="piper", voice_path=str(voice))).load("cpu", "float32")
    message = str(caught.value)
    assert BROKEN_VOICES[name][2] in message and voice.name in message
    assert message.endswith(".") and "\n" not in message and "Traceback" not in message and "Errno" not in message


def test_corrupt_voice_sentence_is_short(voice_dir: Path) -> None:
    voice = voice_dir / "en_US-joe-medium.onnx"
    install(voice, truncated_model())
    with pytest.raises(BackendLoadError) as caught:
        create_backend(Settings(backend="piper", voice_path=str(voice))).load("cpu", "float32")
    assert_clear_sentence(caught.value)


# ---------------------------------------------------------------- the whole app


@pytest.fixture
def broken_app(voice_dir: Path, tmp_path: Path) -> Iterator[tuple[AppProcess, Path, Path]]:
    """The app started with a voice path where nothing is installed yet."""
    voice, outputs = voice_dir / "en_US-joe-medium.onnx", tmp_path / "outputs"
    flags = ["--outputs-dir", str(outputs), "--voice-path", str(voice), "--device", "cpu", "--torch-threads", "1"]
    app = AppProcess([*flags, "--job-timeout-s", "120"])
    try:
        yield app, voice, outputs
    finally:
        app.stop()


def settled_panel(url: str, timeout: float = 120.0) -> str:
    """The panel once the engine has either loaded or failed to (app.py serves the page while it starts)."""
    deadline = time.monotonic() + timeout
    while "engine starting" in (page := panel_html(url)):
        assert time.monotonic() < deadline, "the engine never finished starting"
        time.sleep(0.5)
    return page


def _speak(url: str) -> tuple[object, str]:
    client = Client(url, verbose=False, download_files=False)
    try:
        audio, _subtitles, meta = client.predict("Is anybody there?", *SPEAK, api_name="/speak")
        return audio, meta
    finally:
        client.close()


def test_app_starts_without_its_voice_says_why_and_recovers(broken_app: tuple[AppProcess, Path, Path]) -> None:
    app, voice, outputs = broken_app
    page = settled_panel(app.url)
    assert "engine failed to load" in page
    assert "⚠ The voice config" in page and "does not exist." in page
    with pytest.raises(AppError) as missing:
        _speak(app.url)
    assert "does not exist." in missing.value.message and "Traceback" not in missing.value.message

    install(voice, truncated_model())
    with pytest.raises(AppError) as corrupt:
        _speak(app.url)
    assert "corrupt" in corrupt.value.message
    assert "corrupt" in panel_html(app.url)

    install(voice, None)
    audio, meta = _speak(app.url)
    assert "seed 7" in meta and "s of audio" in meta
    assert str(audio_path(audio)).endswith(".wav")
    page = panel_html(app.url)
    assert "engine ready" in page and "⚠" not in page
    assert app.process.poll() is None
    sidecars = list((outputs / "history").glob("*.json"))
    assert [json.loads(p.read_text())["settings"]["seed"] for p in sidecars] == [7]
