"""What a listener heard against what was typed: text normalisation and error rates, English and Chinese.

A recogniser (Whisper) and the text a user typed write the same speech differently; these rules make the two
comparable so that an error counts only a sound that was not heard, never a spelling.

English, ``normalise_words`` then ``word_error_rate`` (word edit distance / reference words):
  - lower case; curly apostrophes (U+2019, U+2018, U+02BC) folded to ``'``; apostrophes inside a word kept
    ("don't", "tonight's"), quotes around words dropped; hyphens, dashes and slashes split words
    ("ill-disposed" → "ill disposed"); all other punctuation removed.
  - numbers: Whisper writes "platform 4" where the text says "platform four" (and sometimes the reverse), so
    digits on either side become words: cardinals ("1,000" → "one thousand", "23" → "twenty three", no "and"),
    ordinals ("7th" → "seventh"), decimals read digit by digit after "point", "%" → "percent". A year is read as
    a cardinal ("2026" → "two thousand twenty six"), not as "twenty twenty-six": spell years out in references.
  - the abbreviations Whisper prefers are expanded (``ABBREVIATIONS``: "Mr." → "mister", "OK" → "okay").
  - not normalised: spelling variants (colour/color), contractions against their long forms (it's / it is).

Chinese, ``pinyin_syllables`` then ``pinyin_error_rate`` (the same edit distance over syllables, i.e. a CER):
  - each Han character becomes its toneless pinyin (pypinyin, with its phrase context for heteronyms), so the
    script does not matter: Whisper often writes Mandarin in Traditional characters, and 們/们, 說/说 give the
    same syllables; homophones a recogniser may pick instead (他/她, 的/得/地, 在/再) count as heard. Tones are
    dropped because the characters are the only tone evidence the transcript carries.
  - heteronyms: pypinyin's phrase dictionary is Simplified, so a Traditional word misses it and falls back to the
    character's first reading (睡覺 → shui jue, 音樂 → yin le, 住著 → zhu zhu; 23 of 131 common words tried).
    ``pinyin_error_rate`` therefore reads the reference in context and lets a heard character match when the
    reference's syllable is one of its readings (覺: jue, jiao), so 睡覺 is heard right for 睡觉, while 银星
    for 银行 is still an error (星 is never read hang).
  - Latin words in Chinese text are kept as lower-case word tokens (``normalise_words``), so both runs of a
    mixed text ("我们用 Python 写代码") are counted; punctuation is dropped.
  - Arabic numerals are read as Mandarin: cardinals (23 → 二十三, 1,000 → 一千, 10 → 十) and four digits
    before 年 digit by digit (2026年 → 二零二六年), which is how the Mandarin voice reads them.

An empty reference has error 0.0 against an empty hypothesis and 1.0 against anything else (by convention:
the edit distance over zero words is not a rate).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TypeVar

from pypinyin import Style, lazy_pinyin, pinyin

T = TypeVar("T")
U = TypeVar("U")

ABBREVIATIONS = {"mr": "mister", "mrs": "missus", "dr": "doctor", "ok": "okay", "vs": "versus"}
APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'"})
_SPLITTERS = re.compile(r"[-\u2010-\u2015/]")
_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_EN_TOKEN = re.compile(rf"(?P<number>{_NUMBER})(?P<suffix>st|nd|rd|th|%)?|(?P<word>[^\W_]+(?:'[^\W_]+)*)")
_ZH_TOKEN = re.compile(rf"(?P<number>{_NUMBER})|(?P<word>[^\W\d_]+(?:'[^\W_]+)*)")
_HAN = re.compile(r"[\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]+")

_ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")  # fmt: skip
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_SCALES = ((10**9, "billion"), (10**6, "million"), (1000, "thousand"))
_IRREGULAR_ORDINALS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                       "nine": "ninth", "twelve": "twelfth"}  # fmt: skip
_ZH_DIGITS = "零一二三四五六七八九"


def english_number(n: int) -> list[str]:
    """A non-negative integer as English words ("one hundred five"); past the billions, digit by digit."""
    if n >= 10**12:
        return [_ONES[int(d)] for d in str(n)]
    if n < 20:
        return [_ONES[n]]
    if n < 100:
        return [_TENS[n // 10]] + ([_ONES[n % 10]] if n % 10 else [])
    if n < 1000:
        return [_ONES[n // 100], "hundred"] + (english_number(n % 100) if n % 100 else [])
    scale, name = next((s, w) for s, w in _SCALES if n >= s)
    return english_number(n // scale) + [name] + (english_number(n % scale) if n % scale else [])


def _ordinal(word: str) -> str:
    if word in _IRREGULAR_ORDINALS:
        return _IRREGULAR_ORDINALS[word]
    return word[:-1] + "ieth" if word.endswith("y") else word + "th"


def _english_numeral(number: str, suffix: str | None) -> list[str]:
    whole, _, fraction = number.replace(",", "").partition(".")
    words = english_number(int(whole))
    if fraction:
        words += ["point", *(_ONES[int(d)] for d in fraction)]
    if suffix == "%":
        words.append("percent")
    elif suffix:
        words[-1] = _ordinal(words[-1])
    return words


def normalise_words(text: str) -> list[str]:
    """English words as compared: lower case, no punctuation, numbers and abbreviations as spoken words."""
    cleaned = _SPLITTERS.sub(" ", text.lower().translate(APOSTROPHES))
    words: list[str] = []
    for match in _EN_TOKEN.finditer(cleaned):
        if match["number"]:
            words += _english_numeral(match["number"], match["suffix"])
        else:
            word = match["word"]
            words.append(ABBREVIATIONS.get(word, word))
    return words


def _chinese_group(n: int) -> str:
    """1-9999 in characters, zeros between digits read once (1005 → 一千零五)."""
    out, gap = "", False
    for value, unit in ((1000, "千"), (100, "百"), (10, "十"), (1, "")):
        digit = n // value % 10
        if digit == 0:
            gap = bool(out)
            continue
        out += ("零" if gap else "") + _ZH_DIGITS[digit] + unit
        gap = False
    return out


def chinese_number(n: int) -> str:
    """A non-negative integer as Mandarin numerals (23 → 二十三, 10 → 十, 20006 → 二万零六); past 10⁸ digit by digit."""
    if n >= 10**8:
        return "".join(_ZH_DIGITS[int(d)] for d in str(n))
    if n == 0:
        return "零"
    high, low = divmod(n, 10000)
    out = _chinese_group(high) + "万" if high else ""
    if low:
        out += ("零" if high and low < 1000 else "") + _chinese_group(low)
    return out[1:] if out.startswith("一十") else out


def _chinese_numeral(number: str, year: bool) -> str:
    whole, _, fraction = number.replace(",", "").partition(".")
    if year and len(whole) == 4 and not fraction:
        return "".join(_ZH_DIGITS[int(d)] for d in whole)
    spoken = chinese_number(int(whole))
    return spoken + ("点" + "".join(_ZH_DIGITS[int(d)] for d in fraction) if fraction else "")


def _han_tokens(han: str) -> list[tuple[str, str]]:
    """(toneless syllable in context, the character) for each character of a run of Han characters."""
    syllables = lazy_pinyin(han, style=Style.NORMAL)
    if len(syllables) != len(han):  # one syllable per character is pypinyin's rule; read them alone otherwise
        syllables = [lazy_pinyin(ch, style=Style.NORMAL)[0] for ch in han]
    return [(syllable.lower(), ch) for syllable, ch in zip(syllables, han, strict=True)]


def _pinyin_tokens(text: str) -> list[tuple[str, str]]:
    """(syllable or word, its Han character or "" for a Latin word) in order."""
    tokens: list[tuple[str, str]] = []
    position = 0
    for han in _HAN.finditer(text):
        tokens += _other_tokens(text[position : han.start()], following=han.group())
        tokens += _han_tokens(han.group())
        position = han.end()
    return tokens + _other_tokens(text[position:], following="")


def _other_tokens(text: str, following: str) -> list[tuple[str, str]]:
    """The numbers (read as Mandarin) and Latin words of a stretch without Han characters."""
    tokens: list[tuple[str, str]] = []
    for match in _ZH_TOKEN.finditer(text):
        if match["number"]:
            year = not text[match.end() :].strip() and following.startswith("年")
            tokens += _han_tokens(_chinese_numeral(match["number"], year))
        else:
            tokens += [(word, "") for word in normalise_words(match["word"])]
    return tokens


@lru_cache(maxsize=8192)
def readings(ch: str) -> frozenset[str]:
    """Every toneless reading pypinyin knows for one character (覺: jue, jiao)."""
    return frozenset(r.lower() for r in pinyin(ch, style=Style.NORMAL, heteronym=True)[0])


def pinyin_syllables(text: str) -> list[str]:
    """Toneless pinyin per Han character (Simplified or Traditional alike), Latin words as tokens, in order."""
    return [syllable for syllable, _ in _pinyin_tokens(text)]


def _heard_readings(text: str) -> list[frozenset[str]]:
    return [readings(ch) | {syllable} if ch else frozenset({syllable}) for syllable, ch in _pinyin_tokens(text)]


def edit_rate(reference: Sequence[T], hypothesis: Sequence[U], same: Callable[[T, U], bool] = operator.eq) -> float:
    """(substitutions + deletions + insertions) / reference tokens, by token edit distance (``same``: a match)."""
    if not reference:
        return 0.0 if not hypothesis else 1.0
    previous = list(range(len(hypothesis) + 1))
    for i, ref in enumerate(reference, start=1):
        current = [i] + [0] * len(hypothesis)
        for j, hyp in enumerate(hypothesis, start=1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (not same(ref, hyp)))
        previous = current
    return previous[-1] / len(reference)


def word_error_rate(reference: str, hypothesis: str) -> float:
    """English WER on ``normalise_words`` of both sides."""
    return edit_rate(normalise_words(reference), normalise_words(hypothesis))


def pinyin_error_rate(reference: str, hypothesis: str) -> float:
    """Mandarin CER on toneless pinyin: a heard character matches when it can be read as the reference's syllable."""
    return edit_rate(pinyin_syllables(reference), _heard_readings(hypothesis), lambda ref, heard: ref in heard)


ERROR_RATES: dict[str, Callable[[str, str], float]] = {"en": word_error_rate, "zh": pinyin_error_rate}


def error_rate(reference: str, hypothesis: str, language: str) -> float:
    """The error rate for ``language`` ("en": WER, "zh": pinyin CER); raises ``ValueError`` for another."""
    try:
        rate = ERROR_RATES[language]
    except KeyError:
        raise ValueError(f"No error rate for language {language!r}; known: {', '.join(ERROR_RATES)}.") from None
    return rate(reference, hypothesis)
