"""Kokoro-82M in our PyTorch: parity with the int8 ONNX graph, what Whisper hears, and a voice fitted to a prompt."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.judges import assert_heard
from voicelab.backends.base import AudioChunk, SpeechRequest
from voicelab.backends.kokoro.backend import KokoroBackend, KokoroVoices, create
from voicelab.backends.kokoro.config import KokoroDims
from voicelab.backends.kokoro.fitting import FitSettings, StyleFitter
from voicelab.backends.kokoro.frontend import kokoro_phonemes, read_vocab, split_long
from voicelab.backends.kokoro.model import KokoroModel
from voicelab.backends.kokoro.parity import compare, reference_session
from voicelab.backends.kokoro.weights import model_bytes, read_kokoro_weights
from voicelab.backends.strict_loading import load_state_strictly
from voicelab.errors import BackendLoadError
from voicelab.settings import Settings
from voicelab.voice.analysis import f0_median_hz
from voicelab.voice.fitted import FittedStyle
from voicelab.voice.intake import load_prompt

DATA = Path(__file__).parent / "data"
TEXT = "The birch canoe slid on the smooth planks."


@pytest.fixture(scope="module")
def backend() -> KokoroBackend:
    torch.set_num_threads(1)
    voice = KokoroBackend(FitSettings(steps=2, check_every=2, patience=1, start_voices=("jm_kumo",)))
    voice.load("cpu", "float32")
    return voice


def test_ipa_is_mapped_onto_kokoros_symbols() -> None:
    vocab = read_vocab()
    assert kokoro_phonemes("h\u0259l\u02c8o\u028a", vocab) == "h\u0259l\u02c8O"  # oʊ is one symbol
    assert kokoro_phonemes("t\u0283\u025a\u0361", vocab) == "\u02a7\u0259\u0279"  # tʃ joined, ɚ spelled, tie dropped
    assert split_long("ab cd ef", limit=5) == ["ab", "cd ef"]


def test_the_weights_load_strictly_and_a_missing_tensor_is_named(backend: KokoroBackend) -> None:
    tensors = read_kokoro_weights()
    tensors.pop("decoder.generator.conv_post.weight")
    with pytest.raises(BackendLoadError, match=re.escape("decoder.generator.conv_post.weight")):
        load_state_strictly(KokoroModel(KokoroDims()), tensors, "The Kokoro weights do not fit the model")


def test_parity_with_onnxruntime_stage_by_stage(backend: KokoroBackend) -> None:
    sentence = backend.frontend.sentences(TEXT)[0]
    style = backend.packs.style("jm_kumo", len(sentence.ids))
    report = compare(backend.model, reference_session(model_bytes()), list(sentence.ids), style)
    assert report.frames.max_error <= 1 and report.frames.correlation > 0.99
    assert report.f0.correlation > 0.999 and report.energy.correlation > 0.999
    assert report.waveform.correlation > 0.85, report
    assert report.log_spectrogram.correlation > 0.85, report


GLUE = "Glue the sheet to the dark blue background."
TWO_SENTENCES = f"{TEXT} {GLUE}"


@pytest.fixture(scope="module")
def two_sentences(backend: KokoroBackend) -> list[AudioChunk]:
    """TWO_SENTENCES in the default pack at speed 1, spoken once for the module: its first chunk is ``TEXT``
    alone (each sentence is its own model call; only later chunks open with the sentence silence)."""
    return list(backend.synthesize(SpeechRequest(text=TWO_SENTENCES, language="en", sentence_silence_s=0.3)))


def test_whisper_hears_the_text_in_two_sentences(two_sentences: list[AudioChunk]) -> None:
    chunks = two_sentences
    assert len(chunks) == 2 and all(c.sample_rate == 24000 for c in chunks)
    assert np.all(chunks[1].audio[: round(0.3 * 24000)] == 0)  # the sentence silence opens the second chunk
    assert_heard(TWO_SENTENCES, np.concatenate([c.audio for c in chunks]), 24000, "en", bound=0.2)


def test_speed_shortens_the_speech(backend: KokoroBackend, two_sentences: list[AudioChunk]) -> None:
    plain = two_sentences[0]
    assert plain.text == TEXT  # the first sentence, spoken at speed 1
    fast = next(backend.synthesize(SpeechRequest(text=TEXT, language="en", speed=1.5)))
    assert 0.55 < fast.duration_s / plain.duration_s < 0.8


class Listener:
    """What a FitListener hears: each step and the fitted voice."""

    def __init__(self) -> None:
        self.steps: list[tuple[int, int]] = []
        self.styles: list[FittedStyle] = []

    def progress(self, step: int, total: int) -> None:
        self.steps.append((step, total))

    def fitted(self, style: FittedStyle) -> None:
        self.styles.append(style)


def test_a_fitted_voice_moves_toward_the_prompt_speaks_at_its_pitch_and_travels_as_data(
    backend: KokoroBackend, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompt = load_prompt(DATA / "arctic_slt_en_female.wav")  # a woman's voice, the fit starting from a man's pack
    listener = Listener()
    utterances: list[int] = []  # the model's whole-utterance calls
    forward = backend.model.forward
    monkeypatch.setattr(backend.model, "forward", lambda *a, **k: utterances.append(1) or forward(*a, **k))
    with caplog.at_level(logging.INFO, logger="voicelab.backends.kokoro.fitting"), torch.inference_mode():
        chunks = list(backend.synthesize(SpeechRequest(TEXT, "en", prompt=prompt, on_fit=listener)))
    # The held-out sentence by the start pack, by the style checked at step 2 and at the pitch's second round (the
    # first measures the audio of the style kept), then TEXT.
    assert len(utterances) == 4
    assert "fitting voice: step 1 of 2" in caplog.text and "fitting voice: step 2 of 2" in caplog.text
    assert listener.steps == [(1, 2), (2, 2)]  # fitted under the engine's inference mode all the same
    (fitted,) = listener.styles
    assert fitted.ge2e_fitted >= fitted.ge2e_start  # the held-out check keeps the best step (the start included)
    assert len(fitted.vector) == 256 and fitted.prompt_sha256 == prompt.sha256 and fitted.backend == "kokoro"
    stored = FittedStyle.from_json(json.loads(json.dumps(fitted.to_json())))
    monkeypatch.setattr(StyleFitter, "fit", lambda *a, **k: pytest.fail("a carried voice was fitted again"))
    text = f"{TEXT} Rice is often served in round bowls."  # neither sentence is the one the pitch is set on
    # The carried voice says TEXT again, and then a second sentence: its first chunk is TEXT alone (one model call
    # per sentence), so one request both repeats the fitted speech and gives the pitch two sentences to measure.
    again = list(backend.synthesize(SpeechRequest(text, "en", prompt=prompt, fitted=stored, on_fit=listener)))
    assert again[0].text == TEXT and len(again) == 2
    assert np.array_equal(again[0].audio, chunks[0].audio) and len(listener.styles) == 1

    wanted = f0_median_hz(prompt.samples, prompt.sample_rate)
    pitched = np.concatenate([c.audio for c in again])
    plain = replace(stored, f0_scale=1.0)  # the curve as the model predicts it (and as older stored voices speak)
    unpitched = np.concatenate(
        [c.audio for c in backend.synthesize(SpeechRequest(text, "en", prompt=prompt, fitted=plain))]
    )
    assert abs(f0_median_hz(pitched, 24000) / wanted - 1) < 0.05
    assert abs(f0_median_hz(unpitched, 24000) / wanted - 1) > 0.2, "the pitch would have been right without it"
    assert_heard(text, pitched, 24000, "en", bound=0.2)
    older = {k: v for k, v in stored.to_json().items() if k != "f0_scale"}
    assert FittedStyle.from_json(older).f0_scale == 1.0


def test_the_registry_names_kokoro_with_the_mandarin_voice_for_chinese() -> None:
    voices = create(Settings(backend="kokoro"))
    assert isinstance(voices, KokoroVoices)
    assert voices.capabilities.native_cloning and voices.capabilities.languages == ("en", "zh")


def test_the_start_packs_are_spoken_once_per_fitter_not_once_per_prompt(
    backend: KokoroBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    fitter = StyleFitter(backend.model, backend.frontend, backend.packs, "cpu", backend.fit_settings)
    # A shorter sentence than HELD_OUT_TEXT (~2.5 s of speech, GE2E needs 1.6 s): what is counted and compared
    # here, a pack spoken once per fitter and its cached score equal to a fresh one, does not depend on its length.
    held = fitter.tokens(GLUE)
    starts = {"jm_kumo": torch.from_numpy(backend.packs.style("jm_kumo", held.shape[1] - 2))}
    spoken = []
    speech = fitter.spoken
    monkeypatch.setattr(fitter, "spoken", lambda *a: spoken.append(1) or speech(*a))
    prompts = torch.nn.functional.normalize(torch.randn(2, 256, generator=torch.Generator().manual_seed(0)), dim=1)
    first, second = (fitter.pack_scores(starts, held, target) for target in prompts)
    assert len(spoken) == 1  # the second prompt's start is chosen without speaking the pack again
    assert first["jm_kumo"] != second["jm_kumo"]
    fresh = float(speech(held, starts["jm_kumo"])[1] @ prompts[1])  # spoken again, past the counting spy
    assert second["jm_kumo"] == pytest.approx(fresh, abs=1e-5)
