"""English text -> sentences of Kokoro token ids, through espeak-ng (Piper's bridge, as the Piper voice uses).

espeak-ng's IPA is mapped onto Kokoro's vocabulary (misaki's American symbols, as misaki's own espeak fallback maps
them): the diphthongs and affricates Kokoro writes as one symbol are joined (eɪ -> A, aɪ -> I, aʊ -> W, ɔɪ -> Y, oʊ
-> O, dʒ -> ʤ, tʃ -> ʧ), r-coloured vowels are spelled out (ɚ -> əɹ, ɜː -> ɜɹ), the flap and glottal stop become
Kokoro's T and t, ɐ becomes ə, length marks go (American English has none in misaki), and a few phones English
voices never use are replaced by their nearest (r -> ɹ, x -> k, ɬ -> l). Anything else outside the vocabulary is
dropped: espeak's syllabic and nasal diacritics (̩, ̃), the tie bar and language-switch markers; the palatal ʲ goes
too (as misaki drops it). A sentence longer than the model's 510 tokens is cut at its last space before the limit.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from voicelab.backends.kokoro.weights import VOICE_PACKAGE, package_dir
from voicelab.backends.piper.config import read_voice_config
from voicelab.backends.piper.frontend import PiperFrontend

MAX_TOKENS = 510  # 512 positions, less the pad token at each end
JOINED = (
    ("ɜːɹ", "ɜɹ"),
    ("ɜː", "ɜɹ"),
    ("ɪə", "iə"),
    ("eɪ", "A"),
    ("aɪ", "I"),
    ("aʊ", "W"),
    ("ɔɪ", "Y"),
    ("oʊ", "O"),
    ("dʒ", "ʤ"),
    ("tʃ", "ʧ"),
    ("ɚ", "əɹ"),
    ("ɝ", "ɜɹ"),
    ("r", "ɹ"),
    ("x", "k"),
    ("ɬ", "l"),
    ("ʲ", ""),
    ("e", "A"),
    ("ɐ", "ə"),
    ("ɾ", "T"),
    ("\u0294", "t"),  # glottal stop
    ("\u02d0", ""),  # length mark
)
_TIE = re.compile("[\u0361\u035c]")


@dataclass(frozen=True)
class KokoroSentence:
    """One piece the model says in one call: its source text, Kokoro phonemes and token ids (no pads)."""

    text: str
    phonemes: str
    ids: tuple[int, ...]


def read_vocab() -> dict[str, int]:
    """Kokoro's phoneme vocabulary, from the voice package."""
    raw = json.loads((package_dir(VOICE_PACKAGE) / "data" / "vocab.json").read_text(encoding="utf-8"))
    return {str(k): int(v) for k, v in raw["vocab"].items()}


def kokoro_phonemes(ipa: str, vocab: dict[str, int]) -> str:
    """espeak-ng IPA -> the symbols Kokoro reads (see the module docstring for what is joined and dropped)."""
    text = _TIE.sub("", ipa)
    for old, new in JOINED:
        text = text.replace(old, new)
    return "".join(ch for ch in text if ch in vocab)


def split_long(phonemes: str, limit: int = MAX_TOKENS) -> list[str]:
    """Pieces of at most ``limit`` symbols, cut at the last space (or anywhere, if there is none)."""
    pieces: list[str] = []
    while len(phonemes) > limit:
        cut = phonemes.rfind(" ", 0, limit)
        cut = cut if cut > 0 else limit
        pieces.append(phonemes[:cut].strip())
        phonemes = phonemes[cut:].strip()
    return [*pieces, phonemes] if phonemes else pieces


class KokoroFrontend:
    """Sentences as espeak-ng splits them (American English), each as Kokoro token ids."""

    def __init__(self) -> None:
        from voicelab.backends.piper.backend import default_voice_paths

        self.vocab = read_vocab()
        self._espeak = PiperFrontend(read_voice_config(default_voice_paths()[1]))

    def sentences(self, text: str) -> list[KokoroSentence]:
        """Raises InvalidTextError (with the user's sentence) when nothing can be spoken."""
        out: list[KokoroSentence] = []
        for sentence in self._espeak.sentences(text):
            phonemes = kokoro_phonemes("".join(sentence.phonemes), self.vocab)
            for piece in split_long(phonemes):
                out.append(KokoroSentence(sentence.text, piece, tuple(self.vocab[ch] for ch in piece)))
        return out
