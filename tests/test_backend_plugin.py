"""A second backend plugs in by its own file alone, and is driven through the service, the worker engine and the UI.

``tests/fixture_native_backend.py`` declares native cloning, native instructions and streaming; these tests
hear that the engine hands it the prompt, the style and the instruction untouched (no matching, no DSP on
top), and that its chunks reach the caller one by one, the first long before the last.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.fixture_native_backend import CHUNK_DELAY_S, SAMPLE_RATE, SECONDS_PER_CHAR, prompt_pitch_hz
from voicelab.engine.client import EngineClient
from voicelab.engine.messages import ChunkReady
from voicelab.history import History
from voicelab.settings import Settings
from voicelab.studio import GenerationRequest, GenerationService, PromptClip, Take
from voicelab.ui.handlers import Studio
from voicelab.voice.intake import load_prompt

NATIVE = "tests.fixture_native_backend:create"
PROMPT = Path(__file__).parent / "data" / "arctic_slt_en_female.wav"
TEXT = "One. Two two. Three three three."


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GenerationService]:
    settings = Settings(backend=NATIVE, device="cpu", job_timeout_s=60.0)
    with EngineClient(settings) as engine:
        engine.wait_ready(timeout=120)
        yield GenerationService(engine, History(tmp_path_factory.mktemp("history")), settings)


def rms_db(audio: np.ndarray) -> float:
    return float(20 * np.log10(np.sqrt(np.mean(np.square(audio[audio != 0])))))


def test_chunks_stream_in_order_and_the_first_arrives_before_the_last_is_made(service: GenerationService) -> None:
    started = time.monotonic()
    arrivals: list[tuple[float, ChunkReady | Take]] = []
    for event in service.stream(service.prepare(GenerationRequest(TEXT, sentence_silence_s=0.1))):
        arrivals.append((time.monotonic() - started, event))
    chunks = [e for _, e in arrivals if isinstance(e, ChunkReady)]
    take = arrivals[-1][1]
    assert isinstance(take, Take) and [c.index for c in chunks] == [0, 1, 2]
    assert [c.chunk.text for c in chunks] == ["One.", "Two two.", "Three three three."]
    assert arrivals[-1][0] - arrivals[0][0] >= 2 * CHUNK_DELAY_S * 0.9, "the first chunk came only at the end"
    result = take.result
    assert result.chunks == 3 and result.first_audio_s < result.latency_s - CHUNK_DELAY_S
    joined = np.concatenate([c.chunk.audio for c in chunks])
    np.testing.assert_array_equal(joined, result.audio)
    expected_s = len("One.Two two.Three three three.") * SECONDS_PER_CHAR + 2 * 0.1
    assert result.duration_s == pytest.approx(expected_s, abs=0.01)
    assert take.entry is not None and take.entry.kind == "speak"


def test_the_prompt_reaches_the_backend_and_no_matching_is_added(service: GenerationService) -> None:
    generation = service.generate(GenerationRequest("Speak in my voice.", kind="clone", prompt=PromptClip(PROMPT)))
    result = generation.first.result
    prompt = load_prompt(PROMPT)
    expected_hz = prompt_pitch_hz(prompt.samples, prompt.sample_rate)
    assert 150 < expected_hz < 260  # slt is a female voice
    assert prompt_pitch_hz(result.audio, SAMPLE_RATE) == pytest.approx(expected_hz, rel=0.02)
    assert result.similarity is not None and result.similarity_base is None  # scored, not matched
    assert result.f0_prompt_hz is not None and result.f0_prompt_hz > 150


def test_style_and_instruction_are_rendered_by_the_backend_not_twice(service: GenerationService) -> None:
    plain = service.generate(GenerationRequest("Say this sentence.")).first.result
    louder = service.generate(GenerationRequest("Say this sentence.", instruction="much louder")).first
    volume = louder.request.style.volume_db
    assert volume is not None and volume > 3
    assert louder.request.instruction == "much louder"
    assert rms_db(louder.result.audio) - rms_db(plain.audio) == pytest.approx(volume, abs=0.5)
    assert louder.result.duration_s == pytest.approx(plain.duration_s, abs=0.01)  # no DSP re-timing either


def test_the_speak_button_plays_each_chunk_as_it_arrives(service: GenerationService, tmp_path: Path) -> None:
    studio = Studio(service, cache_dir=tmp_path, streaming=True)
    updates = list(studio.speak(TEXT, 1.0, 0.667, 0.8, 0.1, 7))
    live = [u[0] for u in updates if isinstance(u[0], bytes)]
    assert len(live) == 3 and all(chunk.startswith(b"RIFF") for chunk in live)
    assert all(u[3].startswith(f"Generating… sentence {i + 1} of 3 ready") for i, u in enumerate(updates[:3]))
    _, srt, saved, status = updates[-1]
    assert isinstance(saved, str) and saved.endswith(".wav") and "first audio" in status
    cues = Path(srt).read_text(encoding="utf-8").strip().split("\n\n")  # one cue per sentence, timed by its chunk
    assert [c.splitlines()[2] for c in cues] == ["One.", "Two two.", "Three three three."]
    assert cues[1].splitlines()[1] == "00:00:00,300 --> 00:00:00,700"


def test_a_native_backend_prompt_is_scored_without_the_matching_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new prompt on a natively cloning backend costs only what its score line needs (embedding, median pitch):
    the analysis for matching (Praat pitch, formants, long-term spectrum) is never run, and the pitch shown is
    the one that analysis would have given."""
    from voicelab.engine.core import EngineCore
    from voicelab.engine.messages import SynthesisRequest
    from voicelab.voice import profile as profile_module
    from voicelab.voice.analysis import analyse_voice

    prompt = load_prompt(PROMPT)
    full = analyse_voice(prompt.samples, prompt.sample_rate)

    def refused(*_: object) -> None:
        raise AssertionError("the matching analysis ran for a native backend")

    monkeypatch.setattr(profile_module, "analyse_voice", refused)
    core = EngineCore(Settings(backend=NATIVE, device="cpu"))
    try:
        result = core.synthesize(SynthesisRequest("Speak in my voice.", seed=1, prompt=prompt))
    finally:
        core.close()
    assert result.similarity is not None and result.similarity_base is None
    assert result.f0_prompt_hz == pytest.approx(full.f0_median_hz, rel=0.03)
