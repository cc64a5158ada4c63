"""The Clone tab's handler: prompt sentences come at once, a good prompt is cloned and remembered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
import soundfile as sf

from tests.studio_helpers import clone, make_studio
from voicelab.engine.client import EngineClient
from voicelab.engine.messages import SynthesisResult
from voicelab.history import History
from voicelab.judges.scale import SIMILARITY_SCALE
from voicelab.settings import Settings
from voicelab.ui.handlers import Studio, clone_figures
from voicelab.voice.cache import ProfileCacheStats
from voicelab.voice.prompt import PromptAudio

TONE = "tests.fixture_backends:ToneBackend"
PROMPT = Path(__file__).parent / "browser" / "data" / "arctic_slt_en_female.wav"
CONTROLS = (1.0, 0.667, 0.8, 0.2, 7)


@pytest.fixture(scope="module")
def client() -> Iterator[EngineClient]:
    with EngineClient(Settings(backend=TONE, device="cpu", job_timeout_s=60.0)) as engine:
        engine.wait_ready()
        yield engine


@pytest.fixture
def studio(client: EngineClient, tmp_path: Path) -> Studio:
    return make_studio(client, History(tmp_path / "history"))


def test_a_good_prompt_is_cloned_and_remembered(studio: Studio) -> None:
    audio, meta, figures = clone(studio, str(PROMPT), "He turned sharply.", "Say it in her voice.", *CONTROLS)
    assert isinstance(audio, str) and sf.info(audio).duration > 0.3
    assert "seed 7" in meta
    assert "**Prompt:** 2.9 s used · sha256 " in figures
    [entry] = studio.service.history.entries()
    assert entry.kind == "clone" and entry.prompt_sha256 is not None and len(entry.prompt_sha256) == 64


@pytest.mark.parametrize(
    ("make", "sentence"),
    [
        (lambda d: None, "Please upload or record a voice prompt first."),
        (lambda d: _wav(d, np.zeros(48000)), "The voice prompt is silent; please record someone speaking."),
        (
            lambda d: _text(d),
            "The voice prompt is not an audio file that can be read; please upload WAV, FLAC, OGG or MP3.",
        ),
    ],
)
def test_bad_prompts_show_their_sentence(studio: Studio, tmp_path: Path, make, sentence: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(gr.Error) as caught:
        clone(studio, make(tmp_path), "", "Some text.", *CONTROLS)
    assert caught.value.message == sentence
    assert studio.service.history.entries() == []


def test_clone_figures_show_the_judges_similarity_with_ge2e_beside_and_pitch() -> None:
    prompt = PromptAudio(
        np.zeros(32000, dtype=np.float32), 16000, "ab" * 32, notices=("Only the first 30 s were used.",)
    )
    result = SynthesisResult(
        job_id="0123456789ab",
        audio=np.zeros(16000, dtype=np.float32),
        sample_rate=16000,
        latency_s=0.1,
        backend="piper",
        device="cpu",
        dtype="float32",
        profile_cache=ProfileCacheStats(size=3, capacity=8, hits=2, misses=1),
        similarity=0.281,
        similarity_base=0.212,
        similarity_ge2e=0.781,
        similarity_ge2e_base=0.612,
        f0_prompt_hz=211.4,
        f0_output_hz=204.6,
    )
    text = clone_figures(result, prompt)
    assert (
        "**Similarity to the prompt:** 0.21 → 0.28 (base voice → matched) · GE2E, the measure the matching "
        "maximises: 0.61 → 0.78" in text
    )
    assert SIMILARITY_SCALE in text  # what the numbers mean, beside them
    assert "**Median pitch:** prompt 211 Hz · output 205 Hz" in text
    assert "**Profile cache:** 3 of 8 voices · hit rate 67% (2 hits, 1 misses)" in text
    assert "Only the first 30 s were used." not in text  # intake's notice is in the status line, shown once


def _wav(folder: Path, samples: np.ndarray) -> str:
    path = folder / "prompt.wav"
    sf.write(path, samples, 16000)
    return str(path)


def _text(folder: Path) -> str:
    path = folder / "notes.wav"
    path.write_text("this is not audio")
    return str(path)
