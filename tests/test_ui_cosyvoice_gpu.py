"""The Clone button on CosyVoice through the real upstream code (random weights) on an NVIDIA GPU.

The page offers CosyVoice's own controls (its languages, dialect/speed/volume/emotion presets, no Piper sliders),
and one click of Clone with an instruction and dropdowns runs upstream's instruct mode through the worker engine:
streamed sentences counted, a take of plausible length. Random weights speak noise, so the instruction's effect is
heard only with real weights; the path and the counts are real. Skipped without CUDA or the optional install.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import soundfile as sf

from tests.gpu_needs import SCORED
from tests.studio_helpers import make_studio
from tests.test_cosyvoice_gpu import PROMPT, _random_dir, _service, _skip_without_gpu_or_install
from voicelab.engine.client import EngineClient
from voicelab.studio import GenerationService
from voicelab.ui.adapt import PageAdapter
from voicelab.ui.handlers import Studio

pytestmark = pytest.mark.gpu
TEXT = "今天的火锅很好吃。我们明天再来吧。"


@pytest.fixture(scope="module")
def engine_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EngineClient, GenerationService]]:
    _skip_without_gpu_or_install()
    yield from _service(_random_dir(2, tmp_path_factory), tmp_path_factory.mktemp("history"))


def test_the_page_offers_cosyvoices_controls(engine_service: tuple[EngineClient, GenerationService]) -> None:
    _, service = engine_service
    shape = PageAdapter(service, can_stream=True).shape("zh")
    assert shape.options == frozenset() and shape.live
    assert [code for _, code in shape.languages][:3] == ["auto", "en", "zh"]
    assert shape.presets[0] == "四川话 (Sichuanese)" and "cosyvoice" in shape.backend_note


def test_clone_with_an_instruction_and_dropdowns_runs_instruct_mode(
    engine_service: tuple[EngineClient, GenerationService], tmp_path: Path
) -> None:
    engine, service = engine_service
    studio: Studio = make_studio(engine, service.history)  # type: ignore[arg-type]
    controls = (1.0, 0.667, 0.8, 0.2, 5, "auto", "用四川话说")
    dropdowns = ("unspecified",) * 5 + ("fast", "happy")  # pace, emotion
    updates = list(studio.clone(str(PROMPT), "", TEXT, *controls, *dropdowns))
    statuses = [u[3] for u in updates]
    assert any(s.startswith("Generating… sentence 1 of 2") for s in statuses), statuses
    *_, (_live, _srt, saved, final, figures) = updates
    assert "latency" in final and ("Similarity to the prompt" in figures) == SCORED  # unscored without encoders
    assert 1.0 <= sf.info(saved).duration <= 60.0
    [entry] = service.history.entries()[:1]  # type: ignore[union-attr]
    assert entry.kind == "clone" and entry.instruction.startswith("用四川话说。用开心的语气")  # the dropdowns as words
