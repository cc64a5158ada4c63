"""The studio's handlers driven like the buttons would, against the real engine with the tone backend."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
import soundfile as sf

from tests.fixture_backends import SECONDS_PER_CHAR
from tests.studio_helpers import make_studio, speak
from voicelab.engine.client import EngineClient
from voicelab.engine.messages import SynthesisRequest
from voicelab.history import History
from voicelab.instruct.presets import get_preset
from voicelab.settings import Settings
from voicelab.studio import GenerationService
from voicelab.telemetry.sampler import TelemetrySampler
from voicelab.telemetry.samples import EngineState
from voicelab.ui.handlers import Studio, apply_preset, preview_style, seed_for
from voicelab.ui.history_tab import HistoryBrowser
from voicelab.ui.panel import ResourcePanel
from voicelab.voices import VoiceStore

TONE = "tests.fixture_backends:ToneBackend"
DEFAULTS = (1.0, 0.667, 0.8, 0.2, -1)  # speed, noise scale, noise w, silence, seed as the sliders start


@pytest.fixture(scope="module")
def client() -> Iterator[EngineClient]:
    settings = Settings(backend=TONE, device="cpu", queue_size=1, job_timeout_s=60.0, max_text_chars=200)
    with EngineClient(settings) as engine:
        engine.wait_ready()
        yield engine


@pytest.fixture
def studio(client: EngineClient, tmp_path: Path) -> Studio:
    return make_studio(client, History(tmp_path / "history"))


def _wait_in_flight(engine: EngineClient, job_id: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while engine.status().in_flight_job != job_id:
        assert time.monotonic() < deadline, "job never started"
        time.sleep(0.02)


def test_generate_returns_saved_audio_and_one_line_of_figures(studio: Studio) -> None:
    text = "Hello there. A second sentence."
    audio, meta = speak(studio, text, *DEFAULTS[:4], 42)
    assert isinstance(audio, str)
    path = Path(audio)
    assert path.parent == studio.service.history.root and path.suffix == ".wav"
    samples, sr = sf.read(path)
    expected = (len("Hello there.") + len("A second sentence.")) * SECONDS_PER_CHAR + 0.2
    assert len(samples) / sr == pytest.approx(expected, abs=0.01)
    for figure in ("latency", "RTF", f"{expected:.2f} s of audio", "cpu", "float32", "seed 42"):
        assert figure in meta
    [entry] = studio.service.history.entries()
    assert entry.text == text and entry.settings["seed"] == 42 and entry.kind == "speak"


def test_speed_slider_changes_the_duration(studio: Studio) -> None:
    slow, _ = speak(studio, "Twenty characters!!!", 0.5, *DEFAULTS[1:])
    normal, _ = speak(studio, "Twenty characters!!!", 1.0, *DEFAULTS[1:])
    assert sf.info(slow).duration == pytest.approx(2 * sf.info(normal).duration, rel=0.01)


@pytest.mark.parametrize(
    ("text", "controls", "sentence"),
    [
        ("", DEFAULTS, "Please type some text to speak."),
        ("   \n ", DEFAULTS, "Please type some text to speak."),
        ("x" * 201, DEFAULTS, "The text is 201 characters long; the limit is 200. Please shorten it or split it up."),
        ("fine", (5.0, *DEFAULTS[1:]), "Speed must be between 0.25 and 4."),
        ("fine", (1.0, 5.0, *DEFAULTS[2:]), "Noise scale must be between 0 and 2."),
    ],
)
def test_bad_input_shows_exactly_the_users_sentence(studio: Studio, text: str, controls: tuple, sentence: str) -> None:
    with pytest.raises(gr.Error) as caught:
        speak(studio, text, *controls)
    assert caught.value.message == sentence
    assert studio.service.history.entries() == []


def test_full_queue_says_busy_at_once(studio: Studio, client: EngineClient) -> None:
    blocker = SynthesisRequest("sleep 1.5")
    running = client.submit(blocker)
    _wait_in_flight(client, blocker.job_id)
    waiting = client.submit(SynthesisRequest("waiting"))  # fills the queue of one
    started = time.monotonic()
    with pytest.raises(gr.Error) as caught:
        speak(studio, "one too many", *DEFAULTS)
    # at once: while the 1.5 s job still runs (a loaded machine may be slow to answer, never that slow)
    assert not running.done() and time.monotonic() - started < 1.2
    assert caught.value.message.startswith("The engine is busy: 1 jobs are already waiting.")
    running.result(30), waiting.result(30)


def test_worker_crash_is_a_sentence_and_the_next_generation_works(studio: Studio) -> None:
    with pytest.raises(gr.Error) as caught:
        speak(studio, "crash! now", *DEFAULTS)
    assert "stopped unexpectedly" in caught.value.message
    audio, _ = speak(studio, "Back again.", *DEFAULTS)
    assert sf.info(audio).duration > 0


def test_unwritable_outputs_still_return_the_audio_with_the_reason(client: EngineClient, tmp_path: Path) -> None:
    blocker = tmp_path / "outputs"
    blocker.write_text("a file where the outputs folder should be")
    studio = make_studio(client, History(blocker / "history"))
    with pytest.warns(UserWarning, match="could not be saved"):
        audio, meta = speak(studio, "Still audible.", *DEFAULTS)
    assert isinstance(audio, tuple)
    sample_rate, samples = audio
    assert isinstance(samples, np.ndarray) and len(samples) / sample_rate == pytest.approx(14 * SECONDS_PER_CHAR)
    assert "latency" in meta
    assert "The audio was generated but could not be saved to the history folder" in meta


def test_history_tab_lists_shows_and_deletes(studio: Studio) -> None:
    browser = HistoryBrowser(studio.service.history)
    speak(studio, "First.", *DEFAULTS)
    speak(studio, "Second.", *DEFAULTS)
    count, rows, _dropdown, audio, files, details = browser.refresh()
    assert "**2** saved generations" in count
    assert {row[2] for row in rows} == {"First.", "Second."}
    assert audio == files[0] and files[1].endswith(".json") and '"text"' in details
    chosen = rows[1][-1]
    assert browser.show(chosen)[0] == str(studio.service.history.get(chosen).audio_path)
    count, rows, *_ = browser.delete(chosen)
    assert "**1** saved generation " in count and [r[-1] for r in rows] != [chosen]
    with pytest.raises(gr.Error, match="no longer exists"):
        browser.show(chosen)
    with pytest.raises(gr.Error, match="not a history entry id"):
        browser.show("../../etc/passwd")
    with pytest.raises(gr.Error, match="Pick an entry"):
        browser.delete(None)


def test_panel_shows_engine_figures_and_before_after(client: EngineClient) -> None:
    panel = ResourcePanel(client, telemetry=None)
    gauges = panel.gauges()
    assert "engine ready" in gauges and f"worker pid {client.status().worker_pid}" in gauges
    assert 'data-gauge="fragmentation"' not in gauges and "The worker runs on the CPU" in gauges  # a CPU worker
    clean = panel.clean_cache(True)
    assert clean.startswith("**Clean cache** in") and "reserved:" not in clean  # no CUDA rows on a CPU worker
    assert "worker RSS:" in clean and " → " in clean
    old_pid = client.status().worker_pid
    *_, restart = panel.soft_restart(False)
    new_pid = client.status().worker_pid
    assert new_pid != old_pid and f"worker {old_pid} → {new_pid}, ready in" in restart
    picture, text = panel.inspect_memory()
    assert not picture["visible"] and text.startswith("**No device allocator on CPU.**")


def test_controls_map_to_request_fields(studio: Studio) -> None:
    assert studio.options(0.5, 0.9) == {"noise_scale": 0.5}  # the tone backend has no noise_w option
    assert seed_for(-1) is None and seed_for(None) is None and seed_for(7.0) == 7


def test_the_ui_never_imports_torch(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from voicelab.engine.client import EngineClient\n"
        "from voicelab.settings import Settings\n"
        "from voicelab.ui.app_ui import build_ui\n"
        f"settings = Settings(backend='{TONE}', outputs_dir={str(tmp_path)!r})\n"
        "build_ui(EngineClient(settings, start=False), settings)\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


UNSET = ("unspecified",) * 7


def test_preset_fills_instruction_and_text_and_resets_dropdowns() -> None:
    instruction, text, *dropdowns = apply_preset("News anchor")
    preset = get_preset("News anchor")
    assert (instruction, text) == (preset.instruction, preset.sample_text)
    assert dropdowns == list(UNSET)


def test_style_preview_shows_what_was_and_was_not_understood() -> None:
    preview = preview_style("slowly and sadly, blorp", *UNSET)
    assert "**Style:** speed 0.75x" in preview and "emotion sad" in preview
    assert "**Not understood:** blorp" in preview
    assert preview_style("", *UNSET) == "**Style:** neutral (the voice as it is)"
    assert preview_style("x" * 1001, *UNSET).startswith("**The style instruction is too long")


def test_design_makes_takes_side_by_side_with_the_resolved_style(studio: Studio) -> None:
    dropdowns = ("unspecified", "female", "unspecified", "unspecified", "unspecified", "slow", "unspecified")
    *players, meta, parsed = studio.design("Design this voice.", 3, "", "fast and happy", *dropdowns)
    visible = [p for p in players if p["visible"]]
    assert len(visible) == 3 and not players[3]["visible"]
    files = {Path(p["value"]) for p in visible}
    assert len(files) == 3 and all(f.parent == studio.service.history.root for f in files)
    assert meta.count("take ") == 3 and "seed" in meta
    assert "speed 0.75x" in parsed and "gender female" in parsed and "emotion happy" in parsed
    entries = studio.service.history.entries()
    assert len(entries) == 3 and {e.kind for e in entries} == {"design"}
    assert entries[0].instruction == "fast and happy"
    assert entries[0].style == {"speed": 0.75, "emotion": "happy", "gender": "female"}
    assert len({e.settings["seed"] for e in entries}) == 3


def test_design_refuses_an_unknown_dropdown_value(studio: Studio) -> None:
    with pytest.raises(gr.Error) as caught:
        studio.design("Text.", 1, "", "", "unspecified", "robot", *UNSET[2:])
    assert caught.value.message.startswith("Unknown gender choice 'robot'")


def test_panel_with_telemetry_shows_host_gauges_and_draws_the_timeline_once_per_sample(client: EngineClient) -> None:
    telemetry = TelemetrySampler(engine_state=lambda: EngineState(0, None, client.status().worker_pid))
    client.add_stats_listener(telemetry.push_allocator)
    panel = ResourcePanel(client, telemetry)
    assert panel.timeline() is None  # nothing sampled yet
    telemetry.sample_once()
    gauges = panel.gauges()
    assert 'data-gauge="system RAM"' in gauges and 'data-gauge="CPU"' in gauges
    gpu_figure = 'data-gauge="device memory"' if telemetry.nvml.available else "no NVIDIA GPU"
    assert gpu_figure in gauges and "worker RSS" in gauges
    first = panel.timeline()
    assert first is not None and panel.timeline() is first  # a second browser tab gets the same picture
    time.sleep(0.01)
    telemetry.sample_once()
    assert panel.timeline() is not first
    telemetry.close()


def test_design_on_a_saved_voice_clones_it_with_the_style(client: EngineClient, tmp_path: Path) -> None:
    store = VoiceStore(tmp_path / "voices")
    clip = Path(__file__).parent / "data" / "arctic_slt_en_female.wav"
    voice = store.save("Slt", clip.read_bytes(), "He turned sharply.", ".wav")
    studio = Studio(GenerationService(client, History(tmp_path / "history"), client.settings), None, False, store)
    *players, _meta, parsed = studio.design("In her voice, happily.", 1, voice.voice_id, "happily", *UNSET)
    assert players[0]["visible"] and "emotion happy" in parsed
    [entry] = studio.service.history.entries()  # type: ignore[union-attr]
    assert entry.kind == "design" and entry.prompt_sha256 is not None and entry.instruction == "happily"
    with pytest.raises(gr.Error, match="voice"):
        studio.design("Text.", 1, "no-such-voice", "", *UNSET)
