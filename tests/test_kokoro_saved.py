"""A Kokoro voice fitted once is the saved voice's profile: kept beside it, carried by every later request, so a
restarted engine speaks it without fitting again; while it fits, the status line counts the steps."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.judges import assert_heard
from tests.studio_helpers import saved_voice_request, streamed_lines_and_takes
from voicelab.backends.kokoro.backend import KokoroBackend, KokoroVoices
from voicelab.backends.kokoro.fitting import StyleFitter
from voicelab.backends.kokoro.voices import FEMALE_VOICE
from voicelab.engine.inproc import InprocClient
from voicelab.engine.messages import SynthesisRequest
from voicelab.instruct.style import Gender, Style
from voicelab.settings import Settings
from voicelab.studio import GenerationRequest, GenerationService, PromptClip, Take
from voicelab.voice.analysis import f0_median_hz
from voicelab.voice.fitted import FittedStyle
from voicelab.voice.intake import load_prompt
from voicelab.voices import VoiceStore, fitted_voice

DATA = Path(__file__).parent / "data"
TEXT = "The birch canoe slid on the smooth planks."
TINY_FIT = "fit_steps=1,fit_start=jm_kumo"


@pytest.fixture(scope="module")
def client() -> Iterator[InprocClient]:
    torch.set_num_threads(1)
    engine = InprocClient(Settings(backend="kokoro", device="cpu", backend_options=TINY_FIT, auto_clean=False))
    yield engine
    engine.close()


def test_a_saved_voice_is_fitted_once_with_progress_and_reused_after_a_restart(
    client: InprocClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = VoiceStore(tmp_path / "voices")
    voice = store.save("Reader", (DATA / "librivox_en_male.wav").read_bytes())
    service = GenerationService(client, None, client.settings)
    lines, takes = streamed_lines_and_takes(service, saved_voice_request(store, voice.voice_id, TEXT))
    assert "Fitting voice: step 1 of 1…" in lines  # the UI's status line while the voice is fitted
    assert lines.index("Fitting voice: step 1 of 1…") < next(i for i, x in enumerate(lines) if "sentence" in x)
    first: Take = takes[0]
    kept = fitted_voice(voice, "kokoro")
    assert kept is not None and kept == first.result.fitted and len(kept.vector) == 256
    assert client.core.voice.cache_stats().fitted_voices == 1  # the engine holds it (the panel counts it)

    client.soft_restart()  # a fresh core: nothing fitted in memory
    assert client.core.voice.cache_stats().fitted_voices == 0
    monkeypatch.setattr(StyleFitter, "fit", lambda *a, **k: pytest.fail("the saved voice was fitted again"))
    events = list(service.follow(service.prepare(saved_voice_request(store, voice.voice_id, TEXT))))
    again = events[-1]
    assert isinstance(again, Take) and not any(type(e).__name__ == "JobProgress" for e in events)
    assert np.array_equal(again.result.audio, first.result.audio)  # the kept vector speaks exactly as fitted
    assert client.core.voice.cache_stats().fitted_voices == 1  # the carried voice is held (and counted) again


def test_a_damaged_or_foreign_fitted_file_only_costs_a_new_fit(tmp_path: Path) -> None:
    store = VoiceStore(tmp_path / "voices")
    clip = tmp_path / "clip.wav"
    shutil.copy(DATA / "librivox_en_male.wav", clip)
    voice = store.save("Reader", clip.read_bytes())
    voice.fitted_path.write_text("{not json", encoding="utf-8")
    assert fitted_voice(voice, "kokoro") is None
    other = FittedStyle("kokoro", "0" * 64, (0.1,) * 256, "jm_kumo", 0.5, 0.6, 1, 1.0)
    voice.fitted_path.write_text(json.dumps({"kokoro": other.to_json()}), encoding="utf-8")
    assert fitted_voice(voice, "kokoro") is None  # fitted to another clip
    store.delete(voice.voice_id)
    assert not voice.fitted_path.exists()


def test_eval_clone_for_kokoro_asks_for_the_device_results(tmp_path: Path) -> None:
    from voicelab.eval.clone import main

    with pytest.raises(SystemExit) as exited:
        main(["--prompts", str(DATA), "--backend", "kokoro", "--results", str(tmp_path)])
    assert exited.value.code == 2  # no report.json there: the message names tools.kokoro_device


def test_chinese_on_kokoro_is_matched_to_the_prompt_as_on_the_built_in_voices(client: InprocClient) -> None:
    """Kokoro clones English itself; its Chinese is the Mandarin voice, which the engine now matches to the prompt
    (before, a natively cloning backend got no matching in any language)."""
    text = "今天天气很好，我们去公园散步吧。"
    prompt = load_prompt(DATA / "arctic_awb_en_male.wav")  # a man's voice; the Mandarin voice is a woman's
    plain = client.synthesize(SynthesisRequest(text=text, language="zh", seed=3))
    cloned = client.synthesize(SynthesisRequest(text=text, language="zh", seed=3, prompt=prompt))
    assert cloned.similarity_base is not None and cloned.similarity is not None  # matched: the draft is the base
    plain_f0 = f0_median_hz(plain.audio, plain.sample_rate)
    assert cloned.f0_prompt_hz is not None and cloned.f0_output_hz is not None
    assert abs(cloned.f0_output_hz / cloned.f0_prompt_hz - 1) < 0.1 < abs(plain_f0 / cloned.f0_prompt_hz - 1)
    assert_heard(text, cloned.audio, cloned.sample_rate, "zh", bound=0.25)


def test_an_uploaded_clip_is_fitted_once_and_not_again_after_a_soft_restart(
    client: InprocClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = GenerationService(client, None, client.settings)
    upload = GenerationRequest(
        TEXT, kind="clone", language="en", seed=7, prompt=PromptClip(DATA / "arctic_awb_en_male.wav", "")
    )
    events = list(service.follow(service.prepare(upload)))
    first = events[-1]
    assert isinstance(first, Take) and first.result.fitted is not None
    assert any(type(e).__name__ == "JobProgress" for e in events)  # fitted now, with its steps
    client.soft_restart()  # the worker's held voices are gone; the server still holds the upload's fit
    monkeypatch.setattr(StyleFitter, "fit", lambda *a, **k: pytest.fail("the uploaded clip was fitted again"))
    again = list(service.follow(service.prepare(upload)))[-1]
    assert isinstance(again, Take) and np.array_equal(again.result.audio, first.result.audio)


def pack_speech(client: InprocClient, sentence: str, pack: str) -> np.ndarray:
    """``sentence`` as the Kokoro ``pack`` speaks it, straight from the engine's loaded model (no engine stage, no
    second copy of the model), clipped as ``KokoroBackend.synthesize`` clips it."""
    voices = client.core.backend
    assert isinstance(voices, KokoroVoices)
    english = voices.voices["en"]
    assert isinstance(english, KokoroBackend)
    (spoken,) = english.frontend.sentences(sentence)
    style = english.style_for(None, len(spoken.ids), pack)
    return np.clip(english.speak(spoken, style, 1.0, None), -1.0, 1.0)


def test_a_womans_voice_is_a_womans_pack_not_the_mans_moved_up(client: InprocClient) -> None:
    """Asked for a woman's voice without a prompt, Kokoro speaks in a woman's pack (closer to women's voices by
    ECAPA and rated higher by DNSMOS than the default man's pack moved to a woman's pitch: docs/kokoro.md), and the
    engine sets the style against that pack's own pitch, so it is not moved further up."""
    text = "Glue the sheet to the dark blue background."
    woman = client.synthesize(SynthesisRequest(text=text, language="en", seed=3, style=Style(gender=Gender.FEMALE)))
    man = client.synthesize(SynthesisRequest(text=text, language="en", seed=3, style=Style(gender=Gender.MALE)))
    own = pack_speech(client, text, FEMALE_VOICE)
    spoken = woman.audio[: len(own)]
    assert len(woman.audio) == pytest.approx(len(own), rel=0.02)
    assert np.corrcoef(spoken, own[: len(spoken)])[0, 1] > 0.9  # the pack itself, not a transform of the man's
    assert abs(f0_median_hz(woman.audio, woman.sample_rate) / f0_median_hz(own, 24000) - 1) < 0.05
    assert f0_median_hz(man.audio, man.sample_rate) < 130 < f0_median_hz(woman.audio, woman.sample_rate)
    assert_heard(text, woman.audio, woman.sample_rate, "en", bound=0.25)
