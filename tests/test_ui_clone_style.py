"""Clone + instruction in one request, as the Clone button sends it: what the listener hears.

The built-in voices (CPU) clone the prompt and style it in the same request: "speak higher" and the Pitch
dropdown raise the clone's median F0 by about their amount, "louder" raises its level. A native-instruction
backend (the CosyVoice test double) gets the typed instruction and the dropdowns as words in its instruct
mode, with the prompt: the same controls drive it natively.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import soundfile as sf

from tests.audio_measures import Measures, measure, semitones
from tests.fixture_cosyvoice_upstream import decode
from tests.studio_helpers import clone, make_studio
from voicelab.engine.inproc import InprocClient
from voicelab.history import History
from voicelab.settings import Settings
from voicelab.ui.handlers import Studio, apply_preset

PROMPT = Path(__file__).parent / "data" / "arctic_slt_en_female.wav"
TEXT = "The garden looks lovely in the morning."
CONTROLS = (1.0, 0.667, 0.8, 0.2, 3, "auto")  # speed, noise scale, noise w, silence, seed, language
UNSET = ("unspecified",) * 7


def dropdowns(**chosen: str) -> tuple[str, ...]:
    names = ("age", "gender", "pitch", "pitch_variation", "volume", "pace", "emotion")
    return tuple(chosen.get(name, "unspecified") for name in names)


@pytest.fixture(scope="module")
def builtin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Studio]:
    with InprocClient(Settings(device="cpu")) as engine:
        yield make_studio(engine, History(tmp_path_factory.mktemp("history")))


def heard(studio: Studio, instruction: str, *choices: str) -> Measures:
    audio, _status, _figures = clone(studio, str(PROMPT), "", TEXT, *CONTROLS, instruction, *choices)
    samples, rate = sf.read(audio, dtype="float32")
    return measure(samples, rate)


def test_speak_higher_raises_the_clones_pitch_in_the_same_request(builtin: Studio) -> None:
    plain = heard(builtin, "", *UNSET)
    higher = heard(builtin, "speak higher", *UNSET)  # parsed as +3 st
    assert plain.f0_median_hz > 120, "the clone should carry the female prompt's pitch"
    assert 1.5 <= semitones(higher.f0_median_hz, plain.f0_median_hz) <= 4.5, (plain, higher)
    entry = builtin.service.history.entries()[0]  # type: ignore[union-attr]
    assert entry.kind == "clone" and entry.instruction == "speak higher" and entry.prompt_sha256


def test_the_pitch_dropdown_and_a_chinese_instruction_move_the_clone(builtin: Studio) -> None:
    plain = heard(builtin, "", *UNSET)
    dropdown = heard(builtin, "", *dropdowns(pitch="very high"))  # +5 st
    chinese = heard(builtin, "大声一点", *UNSET)
    assert semitones(dropdown.f0_median_hz, plain.f0_median_hz) >= 3.0, (plain, dropdown)
    assert chinese.speech_rms_dbfs - plain.speech_rms_dbfs >= 1.5, (plain, chinese)


@pytest.fixture(scope="module")
def cosyvoice(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Studio, Any]]:
    model_dir = tmp_path_factory.mktemp("cosyvoice2")
    (model_dir / "cosyvoice2.yaml").write_text("# a test double stands in for upstream\n")
    settings = Settings(backend="tests.fixture_cosyvoice_upstream:create", cosyvoice_dir=str(model_dir), device="cpu")
    with InprocClient(settings) as engine:
        model = engine.core.backend.runtime.model  # type: ignore[attr-defined]
        yield make_studio(engine, History(tmp_path_factory.mktemp("history"))), model


def test_cosyvoice_gets_instruction_and_dropdowns_natively_with_the_prompt(cosyvoice: tuple[Studio, Any]) -> None:
    studio, model = cosyvoice
    audio, _status, figures = clone(
        studio, str(PROMPT), "", "你好。", *CONTROLS, "用四川话说", *dropdowns(pace="fast", emotion="happy")
    )
    assert sf.info(audio).duration > 0 and "Similarity to the prompt" in figures
    sent = decode(model.calls[-1]["prompt_text"])
    assert sent == "用四川话说。用开心的语气，语速快一点地说。<|endofprompt|>", sent
    assert "llm_prompt_speech_token" not in model.calls[-1]  # instruct mode, not zero-shot


def test_cosyvoice_reads_english_dropdowns_as_english_words(cosyvoice: tuple[Studio, Any]) -> None:
    studio, model = cosyvoice
    clone(studio, str(PROMPT), "", "Hello there.", *CONTROLS, "", *dropdowns(volume="loud", gender="female"))
    sent = decode(model.calls[-1]["prompt_text"])
    assert sent == "Please speak in a female voice, a little louder.<|endofprompt|>", sent


def test_a_cosyvoice_preset_fills_the_clone_tabs_instruction() -> None:
    instruction, text, *controls = apply_preset("粤语 (Cantonese)")
    assert instruction == "用粤语说这句话" and "饮茶" in text and controls == list(UNSET)
