"""Which voice reads which text: letters are classified by script, the rest follows its neighbours.

Han characters are Chinese and go to the Mandarin voice, Latin letters are English and go to the English
voice; digits, punctuation, spaces and symbols belong to the run they sit in (or the next one at the start).
Text in a script no loaded voice reads (Japanese kana, Hangul, Cyrillic, Arabic …) is refused with one
sentence naming it, instead of being spelled out letter by letter. Torch-free: the validator uses it too.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from voicelab.errors import InvalidTextError

SCRIPT_LANGUAGES = {"han": "zh", "latin": "en"}
LANGUAGE_NAMES = {"en": "English", "zh": "Chinese"}
# Unicode name prefixes of letters, by what a user would call the writing.
SCRIPT_NAMES = {
    "HIRAGANA": "Japanese kana",
    "KATAKANA": "Japanese kana",
    "HALFWIDTH KATAKANA": "Japanese kana",
    "HANGUL": "Korean Hangul",
    "CYRILLIC": "Cyrillic",
    "ARABIC": "Arabic",
    "HEBREW": "Hebrew",
    "GREEK": "Greek",
    "THAI": "Thai",
    "DEVANAGARI": "Devanagari",
}


@dataclass(frozen=True)
class Run:
    """A stretch of text for one voice."""

    language: str
    text: str


@lru_cache(maxsize=4096)
def script_of(ch: str) -> str | None:
    """ "han", "latin", another script's name, or None for a character that is not a letter."""
    if not unicodedata.category(ch).startswith("L"):
        return None
    name = unicodedata.name(ch, "")
    if name.startswith(("CJK UNIFIED IDEOGRAPH", "CJK COMPATIBILITY IDEOGRAPH")):
        return "han"
    if name.startswith(("LATIN", "FULLWIDTH LATIN")):
        return "latin"
    for prefix, label in SCRIPT_NAMES.items():
        if name.startswith(prefix):
            return label
    return name.split(" ")[0].title() or "unknown"


def language_of(ch: str) -> str | None:
    """The language a letter is read in ("zh", "en"), "" for a script no voice reads, None for a non-letter."""
    script = script_of(ch)
    return None if script is None else SCRIPT_LANGUAGES.get(script, "")


def unreadable_scripts(text: str, languages: tuple[str, ...]) -> list[str]:
    """Names of the scripts in ``text`` that none of ``languages`` reads, in order of appearance."""
    found: list[str] = []
    for ch in text:
        script = script_of(ch)
        if script is not None and SCRIPT_LANGUAGES.get(script) not in languages and script not in found:
            found.append(script)
    return found


def check_readable(text: str, languages: tuple[str, ...]) -> None:
    """Refuse text with letters no loaded voice reads, naming the writing and the languages available."""
    scripts = unreadable_scripts(text, languages)
    if not scripts:
        return
    names = {"han": "Chinese characters", "latin": "Latin letters"}
    shown = " and ".join(names.get(s, s) for s in scripts[:2])
    spoken = " and ".join(LANGUAGE_NAMES.get(code, code) for code in languages)
    raise InvalidTextError(f"The text contains {shown}, which no loaded voice can read; VoiceLab speaks {spoken}.")


def split_runs(text: str, default: str) -> list[Run]:
    """Consecutive runs of one language; text without letters is one run in ``default``."""
    runs: list[list[str]] = []  # [language, text]
    pending = ""  # characters before the first letter
    for ch in text:
        language = language_of(ch)
        if language is None or language == "":
            if runs:
                runs[-1][1] += ch
            else:
                pending += ch
            continue
        if runs and runs[-1][0] == language:
            runs[-1][1] += ch
        else:
            runs.append([language, pending + ch if not runs else ch])
            pending = ""
    if not runs:
        return [Run(default, text)]
    return [Run(language, chunk) for language, chunk in runs]


def languages_in(text: str) -> tuple[str, ...]:
    """The languages of ``text``'s letters, in order of first appearance."""
    seen: list[str] = []
    for ch in text:
        language = language_of(ch)
        if language and language not in seen:
            seen.append(language)
    return tuple(seen)
