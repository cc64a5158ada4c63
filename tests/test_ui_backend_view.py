"""The page shows only what the loaded backend supports, read from its ``Capabilities``.

Three backends through the same load handler: the tone backend (one option, no streaming), the plug-in native
backend (native cloning, instructions and streaming, no options) and CosyVoice through its test double
(four languages, free-text instructions): the noise sliders, the live player, the text languages, the presets
and the instruction hint the user sees follow each one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from voicelab.engine.inproc import InprocClient
from voicelab.history import History
from voicelab.settings import Settings
from voicelab.studio import GenerationService
from voicelab.ui.adapt import PageAdapter, PageShape
from voicelab.ui.localized import PRESETS


def shape_of(settings: Settings, tmp_path: Path, language: str) -> PageShape:
    with InprocClient(settings) as engine:
        service = GenerationService(engine, History(tmp_path / "history"), settings)
        return PageAdapter(service, can_stream=True).shape(language)


@pytest.fixture(scope="module")
def cosyvoice_settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    model_dir = tmp_path_factory.mktemp("cosyvoice2")
    (model_dir / "cosyvoice2.yaml").write_text("# a test double stands in for upstream\n")
    yield Settings(backend="tests.fixture_cosyvoice_upstream:create", cosyvoice_dir=str(model_dir), device="cpu")


def test_the_tone_backend_shows_its_one_option_and_no_live_player(tmp_path: Path) -> None:
    shape = shape_of(Settings(backend="tests.fixture_backends:ToneBackend", device="cpu"), tmp_path, "en")
    assert shape.options == {"noise_scale"}  # no noise_w slider: the backend has no such option
    assert not shape.live  # it does not stream
    assert shape.presets[0] == PRESETS[0].name  # the parser's vocabulary for DSP styling
    assert shape.instruction_hint.startswith("e.g. slowly")


def test_a_native_backend_hides_the_piper_sliders_and_offers_free_text_instructions(tmp_path: Path) -> None:
    shape = shape_of(Settings(backend="tests.fixture_native_backend:create", device="cpu"), tmp_path, "en")
    assert shape.options == frozenset() and shape.live
    assert [code for _, code in shape.languages] == ["auto", "en", "zh"]
    assert shape.presets[:2] == ["Fast", "Slow"]
    assert "native-test" in shape.backend_note and "reads the instruction itself" in shape.backend_note
    assert not shape.builtin_note  # the built-in voices' licence note is not this backend's


def test_cosyvoice_shows_its_languages_and_chinese_dialect_examples(
    cosyvoice_settings: Settings, tmp_path: Path
) -> None:
    shape = shape_of(cosyvoice_settings, tmp_path, "zh")
    assert [code for _, code in shape.languages] == ["auto", "en", "zh", "ja", "ko"]
    assert shape.presets[:3] == ["四川话 (Sichuanese)", "粤语 (Cantonese)", "上海话 (Shanghainese)"]
    assert "语速快 (fast)" in shape.presets and "大声 (loud)" in shape.presets and "开心 (happy)" in shape.presets
    assert "用四川话说" in shape.instruction_hint
    assert shape.options == frozenset() and shape.live
    english = shape_of(cosyvoice_settings, tmp_path, "en")
    assert english.presets[0] == "Fast" and english.examples[0][0].startswith("The quick brown fox")
