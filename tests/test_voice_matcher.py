"""Voice matching on a real prompt: the built-in voice moves toward the prompt speaker and onto its pitch."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from voicelab.eval.clone import CALIBRATION_TEXT
from voicelab.eval.voices import builtin_torch_synthesizer
from voicelab.voice.cache import ProfileCache
from voicelab.voice.dsp import apply_transform
from voicelab.voice.encoder import SpeakerEncoder
from voicelab.voice.intake import load_prompt
from voicelab.voice.matcher import VoiceMatcher
from voicelab.voice.profile import SpeakerProfile, build_profile

DATA = Path(__file__).parent / "data"
HELD_OUT_TEXT = "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background."


@pytest.fixture(scope="module")
def matcher() -> Iterator[VoiceMatcher]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the LSTM encoder is far faster single-threaded on a shared CPU
    yield VoiceMatcher(SpeakerEncoder("cpu"))
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def female_profile(matcher: VoiceMatcher) -> SpeakerProfile:
    return build_profile(load_prompt(DATA / "arctic_slt_en_female.wav"), matcher.encoder)


def test_profile_measures_the_prompt(female_profile: SpeakerProfile) -> None:
    assert 170.0 < female_profile.f0_median_hz < 215.0  # slt is a US English female speaker
    assert female_profile.embedding.shape == (256,)
    assert female_profile.stats.voiced_ratio > 0.3 and female_profile.duration_s > 1.0
    assert len(female_profile.sha256) == 64


def test_matching_raises_similarity_and_lands_on_the_prompt_pitch(
    matcher: VoiceMatcher, female_profile: SpeakerProfile
) -> None:
    """The built-in voice as the engine runs it, seeded: piper's ONNX runtime draws its noise unseeded, and its
    held-out gain moved between +0.056 and +0.088 from one run to the next (once +0.049, under the bound); seeded,
    the search gains +0.146 and the held-out sentence +0.085 every time."""
    synthesize = functools.partial(builtin_torch_synthesizer(), "en")
    calibration = synthesize(CALIBRATION_TEXT)
    result = matcher.match(female_profile, lambda: calibration)
    assert result.similarity_matched > result.similarity_base + 0.05
    assert result.evaluations <= 20
    assert result.transform.f0_target_hz == pytest.approx(female_profile.f0_median_hz)

    audio, sr = synthesize(HELD_OUT_TEXT)  # a sentence the search never saw
    base_similarity, base_f0 = matcher.score(audio, sr, female_profile)
    matched = apply_transform(audio, sr, result.transform)
    similarity, f0 = matcher.score(matched, sr, female_profile)
    assert similarity > base_similarity + 0.05
    assert f0 == pytest.approx(female_profile.f0_median_hz, rel=0.10)
    assert base_f0 < 0.7 * female_profile.f0_median_hz  # the built-in voice is a low male voice
    assert float(np.max(np.abs(matched))) <= 1.0

    cache = ProfileCache(2)
    cache.put(female_profile, {"en": result})  # the match is kept beside the profile, per backend voice
    cached = cache.get(female_profile.sha256)
    assert cached is not None and cached.match("en") is result and cached.profile is female_profile
    assert cached.match("zh") is None
