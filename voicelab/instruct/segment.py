"""Split an instruction into lexicon tokens: English by longest phrase match over words, Chinese by
longest match over characters, numbers with units ("1.2x", "+3 semitones", "-6 dB", "1.5倍速") as exact
values, and ages ("30 years old", "六十多岁") as age groups.

Unknown English words become one token each; unknown Chinese characters are kept together as one
token per run, so the user sees "紫色", not "紫" and "色".
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from voicelab.instruct.lexicon import BOUNDARY, Effect, Kind, LexEntry, content
from voicelab.instruct.lexicon_en import EN_LEXICON, EN_MAX_PHRASE_WORDS
from voicelab.instruct.lexicon_zh import ZH_LEXICON, ZH_MAX_WORD_CHARS
from voicelab.instruct.scales import Attr
from voicelab.instruct.style import Age


@dataclass(frozen=True)
class Token:
    """A word or phrase as written (lower-cased) and what it means; ``entry`` is None when not understood."""

    text: str
    entry: LexEntry | None
    lang: str


_NUMBER = re.compile(
    r"(?P<years>\d{1,3}|[一二两三四五六七八九十]{1,3})\s*(?:-\s*)?(?:years?[\s-]*old|岁|多岁|来岁)|"
    r"(?P<num>[+-]?\d+(?:\.\d+)?|[一二两三四五六七八九十]{1,3})\s*"
    r"(?P<unit>x|\u00d7|times|倍速|倍|semitones?|st|个半音|半音|db|decibels?|分贝)(?![a-z])"
    r"(?:\s*(?P<dir>higher|lower|louder|quieter|softer|faster|slower|up|down)\b)?"
)
_PIECE = re.compile(r"(?P<word>[a-z]+(?:['-][a-z]+)*)|(?P<cjk>[\u3400-\u4dbf\u4e00-\u9fff]+)|(?P<num>\d+(?:\.\d+)?)|\S")
# after NFKC, full-width Chinese punctuation is plain ASCII, except these marks
_BOUNDARY_MARKS = frozenset(',.;:!?()[]{}/|&~"-\u2013\u2014\u2026\u3001\u3002\u201c\u201d\u300a\u300b')
_UNIT_ATTR: Mapping[str, Attr] = {
    **dict.fromkeys(("x", "\u00d7", "times", "倍速", "倍"), Attr.SPEED),
    **dict.fromkeys(("semitone", "semitones", "st", "个半音", "半音"), Attr.PITCH),
    **dict.fromkeys(("db", "decibel", "decibels", "分贝"), Attr.VOLUME),
}
_ZH_DIGITS: Mapping[str, int] = {d: i for i, d in enumerate("零一二三四五六七八九", start=0)} | {"两": 2}
_AGE_GROUPS: tuple[tuple[float, Age], ...] = (
    (13, Age.CHILD),
    (36, Age.YOUNG_ADULT),
    (60, Age.MIDDLE_AGED),
    (float("inf"), Age.ELDERLY),
)
_DOWN_WORDS = frozenset(("lower", "quieter", "softer", "slower", "down"))
_MORPH_KINDS = frozenset((Kind.CONTENT, Kind.DIRECTION, Kind.NOUN))


def normalize(text: str) -> str:
    """NFKC (full-width forms to plain), lower case, typographic apostrophes to '."""
    return unicodedata.normalize("NFKC", text).lower().replace("\u2019", "'").replace("\u2018", "'")


def segment(text: str) -> list[Token]:
    """All tokens of ``text`` in order; punctuation becomes clause boundaries, other symbols are dropped."""
    norm = normalize(text)
    tokens: list[Token] = []
    pos = 0
    for match in _NUMBER.finditer(norm):
        tokens.extend(_segment_plain(norm[pos : match.start()]))
        tokens.append(_age_token(match) if match["years"] else _number_token(match))
        pos = match.end()
    tokens.extend(_segment_plain(norm[pos:]))
    return tokens


def _age_token(match: re.Match[str]) -> Token:
    """'30 years old', '6岁': the age group that age falls in."""
    years = _to_float(match["years"])
    age = next(group for limit, group in _AGE_GROUPS if years < limit)
    return Token(match.group(0).strip(), content(cats=(age,)), "num")


def _number_token(match: re.Match[str]) -> Token:
    """An exact value; pitch and volume without a sign or direction word are signed later by the parser."""
    number = _to_float(match["num"])
    attr = _UNIT_ATTR[match["unit"]]
    down = match["dir"] in _DOWN_WORDS
    if attr is Attr.SPEED:
        value = 1.0 / number if down and number > 0 else number
        sign = 1 if value >= 1.0 else -1
    else:
        signed = match["num"][0] in "+-" or match["dir"] is not None
        value = -abs(number) if down else number
        sign = (1 if value >= 0 else -1) if signed else 0
    effect = Effect(attr, sign, value=value)
    return Token(match.group(0).strip(), LexEntry(Kind.CONTENT, effects=(effect,)), "num")


def _to_float(numeral: str) -> float:
    """Arabic digits, or a small Chinese numeral ("两", "十二", "二十")."""
    if numeral[-1].isascii():
        return float(numeral)
    tens, _, units = numeral.rpartition("十")
    if "十" not in numeral:
        return float(_ZH_DIGITS[numeral[-1]])
    return float((_ZH_DIGITS[tens] if tens else 1) * 10 + (_ZH_DIGITS[units] if units else 0))


def _segment_plain(text: str) -> Iterator[Token]:
    words: list[str] = []
    for match in _PIECE.finditer(text):
        if match["word"]:
            words.append(match["word"])
            continue
        yield from _match_words(words)
        words = []
        if match["cjk"]:
            yield from _match_cjk(match["cjk"])
        elif match["num"]:
            yield Token(match["num"], None, "num")
        elif match.group(0) in _BOUNDARY_MARKS:
            yield Token(match.group(0), BOUNDARY, "mark")
    yield from _match_words(words)


def _match_words(words: list[str]) -> Iterator[Token]:
    """Greedy longest phrase match over a run of English words."""
    i = 0
    while i < len(words):
        for n in range(min(EN_MAX_PHRASE_WORDS, len(words) - i), 0, -1):
            phrase = " ".join(words[i : i + n])
            entry = EN_LEXICON.get(phrase)
            if entry is not None:
                yield Token(phrase, entry, "en")
                i += n
                break
        else:
            yield from _single_word(words[i])
            i += 1


def _single_word(word: str) -> Iterator[Token]:
    """A word not in the lexicon as written: try simple inflections, then the parts of a hyphenated word."""
    for variant in _variants(word):
        entry = EN_LEXICON.get(variant)
        if entry is not None and entry.kind in _MORPH_KINDS:
            yield Token(word, entry, "en")
            return
    if "-" in word:
        yield from _match_words(word.split("-"))
        return
    yield Token(word, None, "en")


def _variants(word: str) -> Iterator[str]:
    if word.endswith("'s"):
        yield word[:-2]
    suffixes = (("ily", "y"), ("ly", ""), ("ly", "le"), ("ing", ""), ("ing", "e"), ("ed", ""), ("ed", "e"))
    for suffix, replacement in (*suffixes, ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) > len(suffix) + 2:
            yield word[: -len(suffix)] + replacement


def _match_cjk(run: str) -> Iterator[Token]:
    """Forward maximum matching over the Chinese lexicon; unmatched characters are grouped."""
    unknown = ""
    i = 0
    while i < len(run):
        for n in range(min(ZH_MAX_WORD_CHARS, len(run) - i), 0, -1):
            entry = ZH_LEXICON.get(run[i : i + n])
            if entry is not None:
                break
        else:
            unknown += run[i]
            i += 1
            continue
        if unknown:
            yield Token(unknown, None, "zh")
            unknown = ""
        yield Token(run[i : i + n], entry, "zh")
        i += n
    if unknown:
        yield Token(unknown, None, "zh")
