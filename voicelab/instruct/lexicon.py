"""Lexicon entry types shared by the English and Chinese word lists, and small builders for them.

A word (or phrase) is one of:

- CONTENT: says something about the voice: scalar ``Effect``s ("slowly" → speed down) and/or
  ``Category`` values ("elderly" → Age.ELDERLY). *Primary* effects are what the word plainly says;
  *hints* are secondary ("warm" suggests a slightly lower pitch) and lose to any primary mention.
  ``emphasis`` effects join only when the word is intensified ("非常开心" is livelier than "开心").
- DIRECTION: "higher", "lower", "高", "大": up/down/normal on the attribute named by the nearest noun
  in the same clause ("higher pitch", "音量大"), else on its default attribute.
- NOUN: names an attribute ("pitch", "语速"); means nothing alone.
- INTENSITY: sets the grade of the next content word ("very", "稍微"), or of the previous one when
  ``postfix`` ("慢一点", "快得多").
- NEGATION: flips the next content word to a slight step the other way ("not too fast", "别太大声").
- BOUNDARY: ends a clause ("and", ",", "但是"); intensity, negation and noun binding stay inside a clause.
- STOP: carries no meaning for the style ("in", "voice", "的", "说").
- QUALITY: names a voice quality the signal-level voice cannot be given (hoarse, clear articulation,
  professional): read, and reported as "not rendered" rather than passed off as a pitch or volume hint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

from voicelab.instruct.scales import PLAIN, SLIGHT, Attr
from voicelab.instruct.style import Age, Emotion, Gender


class Kind(Enum):
    CONTENT = "content"
    DIRECTION = "direction"
    NOUN = "noun"
    INTENSITY = "intensity"
    NEGATION = "negation"
    BOUNDARY = "boundary"
    STOP = "stop"


@dataclass(frozen=True)
class Effect:
    """One step on a scalar attribute; ``value`` is an exact number taken from the text instead of a grade."""

    attr: Attr
    direction: int
    grade: int = PLAIN
    primary: bool = True
    value: float | None = None


@dataclass(frozen=True)
class Category:
    """An emotion, age or gender value."""

    value: Emotion | Age | Gender
    primary: bool = True

    @property
    def attr(self) -> str:
        return _CATEGORY_ATTR[type(self.value)]


_CATEGORY_ATTR: dict[type, str] = {Emotion: "emotion", Age: "age", Gender: "gender"}


@dataclass(frozen=True)
class LexEntry:
    """What one word or phrase means; which fields matter depends on ``kind`` (see the module docstring)."""

    kind: Kind
    effects: tuple[Effect, ...] = ()
    categories: tuple[Category, ...] = ()
    emphasis: tuple[Effect, ...] = ()
    grade: int = PLAIN
    postfix: bool = False
    attr: Attr | None = None
    direction: int = 0
    keeps_grade: bool = False
    fallback: Kind | None = None


STOP = LexEntry(Kind.STOP)
QUALITY = LexEntry(Kind.CONTENT)  # a content word with no effect: always "not rendered"
BOUNDARY = LexEntry(Kind.BOUNDARY)
NEGATION = LexEntry(Kind.NEGATION)


def fx(attr: Attr, direction: int, grade: int = PLAIN) -> Effect:
    """A primary effect."""
    return Effect(attr, direction, grade, primary=True)


def hint(attr: Attr, direction: int, grade: int = SLIGHT) -> Effect:
    """A secondary effect: used only when no primary word speaks about the attribute."""
    return Effect(attr, direction, grade, primary=False)


def content(
    *effects: Effect, cats: tuple[Emotion | Age | Gender, ...] = (), hint_cats: tuple[Emotion | Age | Gender, ...] = ()
) -> LexEntry:
    categories = tuple(Category(v, primary=True) for v in cats) + tuple(Category(v, primary=False) for v in hint_cats)
    return LexEntry(Kind.CONTENT, effects=effects, categories=categories)


# What an intensified emotion word adds ("very sad" is also slower and softer than "sad"); these
# follow the emotion recipes in ``render`` so that emphasis pushes the same way.
EMOTION_EMPHASIS: Mapping[Emotion, tuple[Effect, ...]] = MappingProxyType(
    {
        Emotion.NEUTRAL: (),
        Emotion.HAPPY: (hint(Attr.RANGE, +1), hint(Attr.VOLUME, +1)),
        Emotion.SAD: (hint(Attr.SPEED, -1), hint(Attr.VOLUME, -1)),
        Emotion.ANGRY: (hint(Attr.VOLUME, +1), hint(Attr.RANGE, +1)),
        Emotion.SURPRISED: (hint(Attr.PITCH, +1), hint(Attr.RANGE, +1)),
        Emotion.FEARFUL: (hint(Attr.SPEED, +1), hint(Attr.VOLUME, -1)),
        Emotion.DISGUSTED: (hint(Attr.SPEED, -1),),
        Emotion.CALM: (hint(Attr.SPEED, -1), hint(Attr.RANGE, -1)),
        Emotion.WHISPER: (hint(Attr.VOLUME, -1),),
    }
)


def emotion(value: Emotion, *effects: Effect, primary: bool = True) -> LexEntry:
    """An emotion word; its ``EMOTION_EMPHASIS`` effects join (as hints) when it is intensified."""
    return LexEntry(
        Kind.CONTENT, effects=effects, categories=(Category(value, primary),), emphasis=EMOTION_EMPHASIS[value]
    )


def direction(sign: int, default: Attr | None = None, grade: int = PLAIN, fallback: Kind | None = None) -> LexEntry:
    return LexEntry(Kind.DIRECTION, direction=sign, attr=default, grade=grade, fallback=fallback)


def noun(attr: Attr) -> LexEntry:
    return LexEntry(Kind.NOUN, attr=attr)


def intensity(grade: int, postfix: bool = False) -> LexEntry:
    return LexEntry(Kind.INTENSITY, grade=grade, postfix=postfix)


def words(entry: LexEntry, *keys: str) -> dict[str, LexEntry]:
    """The same entry under several spellings."""
    return dict.fromkeys(keys, entry)


def build(*groups: Mapping[str, LexEntry]) -> Mapping[str, LexEntry]:
    """Merge word groups into a read-only lexicon; a word defined twice is a bug in the word lists."""
    merged: dict[str, LexEntry] = {}
    for group in groups:
        for key, entry in group.items():
            if key in merged and merged[key] != entry:
                raise ValueError(f"lexicon word {key!r} is defined twice with different meanings")
            merged[key] = entry
    return MappingProxyType(merged)
