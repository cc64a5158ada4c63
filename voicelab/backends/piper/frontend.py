"""Text -> sentences of phoneme ids, exactly as Piper does it (its espeak-ng bridge and id rules).

Piper phonemises the whole text with espeak-ng, which also decides where sentences end; ``[[ ... ]]``
blocks are raw phonemes. We do the same, then find each sentence's source text by phonemising
candidate chunks (split after . ! ? and at blank lines) and matching them to espeak's sentences.
espeak-ng is not thread-safe, so every call holds the frontend's lock.
"""

from __future__ import annotations

import itertools
import re
import threading
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from piper.phoneme_ids import phonemes_to_ids
from piper.phonemize_espeak import ESPEAK_DATA_DIR, EspeakPhonemizer

from voicelab.backends.piper.config import VoiceConfig
from voicelab.errors import InvalidTextError

_RAW_BLOCK = re.compile(r"(\[\[.*?\]\])")
_CHUNK_END = re.compile("[.!?\u2026]+[\"'\u201d\u2019)\\]]*\\s+|\n\\s*\n")  # terminators, closing quotes
_KEEP_CONTROLS = {"\n", "\t"}
_STRIPPED_CATEGORIES = {"Cc", "Cf", "Cs", "Co"}
_SPEECH_CATEGORIES = {"Lu", "Ll", "Lt", "Lo"}  # letters; stress and length marks (Lm) alone are not speech
_MAX_CHUNKS_PER_SENTENCE = 12


@dataclass(frozen=True)
class Sentence:
    """One sentence: its source text (for display), espeak phonemes and the model's input ids."""

    text: str
    phonemes: tuple[str, ...]
    ids: tuple[int, ...]


def clean_text(text: str) -> str:
    """Drop control, format, surrogate and private-use characters; keep newlines and tabs."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return "".join(ch for ch in text if ch in _KEEP_CONTROLS or unicodedata.category(ch) not in _STRIPPED_CATEGORIES)


class PiperFrontend:
    """Phonemiser for one voice config; owns the lock that serialises espeak-ng calls."""

    def __init__(self, config: VoiceConfig, espeak_data_dir: str | Path = ESPEAK_DATA_DIR) -> None:
        self.config = config
        self._lock = threading.Lock()
        with self._lock:
            self._espeak = EspeakPhonemizer(espeak_data_dir)
        self._clusters = {tuple(c) for c in config.vowel_clusters} or None

    def sentences(self, text: str) -> list[Sentence]:
        """Sentences with speech in them; raises InvalidTextError when there is nothing to say."""
        text = clean_text(text)
        if not text.strip():
            raise InvalidTextError("Please type some text to speak.")
        with self._lock:
            phonemes = self._phonemize(text)
            texts = self._sentence_texts(text, phonemes)
        result = [
            Sentence(text=t, phonemes=tuple(p), ids=tuple(phonemes_to_ids(p, self.config.phoneme_id_map)))
            for t, p in zip(texts, phonemes, strict=True)
            if _has_speech(p)
        ]
        if not result:
            raise InvalidTextError("The text has nothing that can be spoken; please type words, numbers or letters.")
        return result

    def _phonemize(self, text: str) -> list[list[str]]:
        """Piper's PiperVoice.phonemize for espeak voices: phonemes per sentence (caller holds the lock)."""
        sentences: list[list[str]] = []
        parts = _RAW_BLOCK.split(text)
        prev_raw = False
        for i, part in enumerate(parts):
            if part.startswith("[["):
                if not sentences:
                    sentences.append([])
                if i > 0 and parts[i - 1].endswith(" "):
                    sentences[-1].append(" ")
                sentences[-1].extend(part[2:-2].strip())
                if i < len(parts) - 1 and parts[i + 1].startswith(" "):
                    sentences[-1].append(" ")
                prev_raw = True
                continue
            found = self._espeak.phonemize(self.config.espeak_voice, part, vowel_clusters=self._clusters)
            if prev_raw and found:
                sentences[-1].extend(found[0])  # text right after raw phonemes continues that sentence
                found = found[1:]
            sentences.extend(found)
            prev_raw = False
        if sentences and not sentences[-1]:
            sentences.pop()
        return sentences

    def _sentence_texts(self, text: str, sentences: list[list[str]]) -> list[str]:
        """The source text of each sentence: the shortest run of chunks that phonemises to exactly it."""
        chunks = _chunks(text)
        texts: list[str] = []
        start = 0
        for phonemes in sentences:
            end = start
            while end < min(len(chunks), start + _MAX_CHUNKS_PER_SENTENCE):
                end += 1
                if self._phonemize(" ".join(chunks[start:end])) == [phonemes]:
                    break
            else:
                end = start  # no match: leave this sentence without text rather than guess
            texts.append(" ".join(chunks[start:end]))
            start = end
        return texts


def _chunks(text: str) -> list[str]:
    """Candidate sentence pieces: cut after terminators (with closing quotes) and at blank lines."""
    cuts = [0, *(m.end() for m in _CHUNK_END.finditer(text)), len(text)]
    pieces = (text[a:b].strip() for a, b in itertools.pairwise(cuts))
    return [p for p in pieces if p]


def _has_speech(phonemes: list[str]) -> bool:
    return any(unicodedata.category(ch) in _SPEECH_CATEGORIES for p in phonemes for ch in p)
