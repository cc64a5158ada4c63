"""Natural-language style instruction (English or Chinese) → ``Style``; deterministic, offline, lexicon + rules.

How words combine (scales in ``scales``):

- Clauses are split at punctuation and at "and"/"but"/"和"/"但是"...; intensity, negation and the
  noun a direction word attaches to ("higher pitch", "音量大一点") stay inside one clause.
- Intensity shifts a word's grade: "slowly" 0.75x, "very slowly" 0.6x, "a bit slower"/"稍微慢一点" 0.9x,
  "extremely slowly" 0.5x. A postfix intensity ("慢一点", "快得多") modifies the word before it; an
  English one left at the end of a clause ("slow down a little") modifies the clause's last word.
- Negation gives a slight step the other way: "not too fast" → 0.9x, "don't shout"/"别太大声" → -3 dB;
  a negated emotion, age or gender is simply not set. "less" keeps a given intensity ("much less loud" → -6 dB).
- Several words on one attribute: plain statements beat hints from descriptors ("warm" hints a lower
  pitch, "higher pitch" says it); same-direction mentions take the strongest ("deep, low voice" → -3 st,
  not -6); opposite directions take the later one, except that two negations cancel ("not too slow, not
  too fast" -> 1.0). Numbers ("1.2x", "+2 semitones") beat words; ages ("30 years old") pick an age group.
- Emotion, age and gender: plain words beat hints; the later wins.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from voicelab.errors import InvalidSettingError
from voicelab.instruct.lexicon import Category, Effect, Kind, LexEntry, fx
from voicelab.instruct.scales import NEUTRAL, PLAIN, SLIGHT, Attr, clamp, clamp_grade, level
from voicelab.instruct.segment import Token, segment
from voicelab.instruct.style import Style

logger = logging.getLogger(__name__)

MAX_INSTRUCTION_CHARS = 1000


@dataclass(frozen=True)
class ParsedInstruction:
    """The style an instruction asks for and what became of each word.

    matched: words that set a value of the style ("Understood"). not_rendered: words that were read but
    changed nothing (another word on the same attribute won, or it names a quality the voice cannot be
    given). not_understood: words not in the lexicon. renders: (word, Style field) for every value a
    matched word decided, so a dropdown that overrides a field can move its words to ``not_rendered``.
    """

    style: Style = field(default_factory=Style)
    not_understood: tuple[str, ...] = ()
    matched: tuple[str, ...] = ()
    not_rendered: tuple[str, ...] = ()
    renders: tuple[tuple[str, str], ...] = ()

    def without_fields(self, overridden: frozenset[str]) -> ParsedInstruction:
        """The same words, with those whose every value was overridden (by a dropdown) moved to not rendered."""
        kept = {word for word, name in self.renders if name not in overridden}
        gone = tuple(word for word in self.matched if word not in kept and any(w == word for w, _ in self.renders))
        return replace(
            self,
            matched=tuple(word for word in self.matched if word not in gone),
            not_rendered=_unique([*self.not_rendered, *gone]),
            renders=tuple((word, name) for word, name in self.renders if name not in overridden),
        )


def parse_instruction(text: str) -> ParsedInstruction:
    """Parse a style instruction; raises ``InvalidSettingError`` only for absurdly long text."""
    if len(text) > MAX_INSTRUCTION_CHARS:
        raise InvalidSettingError(f"The style instruction is too long (at most {MAX_INSTRUCTION_CHARS} characters).")
    reader = _Reader()
    for clause in _clauses(segment(text)):
        reader.read_clause(clause)
    style, deciders = _resolve(reader.scalars, reader.picks)
    parsed = reader.result(style, deciders)
    logger.debug("instruction %r -> %s", text, parsed)
    return parsed


@dataclass
class _Mention:
    """One statement about a scalar attribute; ``unsigned`` numbers take their sign from their clause."""

    attr: Attr
    direction: int
    grade: int
    primary: bool
    clause: int
    value: float | None = None
    unsigned: bool = False
    negated: bool = False
    group: int = -1  # the words it came from (``_Reader.groups``)


@dataclass(frozen=True)
class _Word:
    """The last meaningful word, kept so that a following intensity ("慢一点") can re-grade it."""

    entry: LexEntry
    shift: int
    negated: bool
    keeps_grade: bool
    explicit: bool
    scalar_start: int
    pick_start: int
    clause: int
    group: int = -1


class _Reader:
    """Reads clauses left to right, holding pending intensity and negation."""

    def __init__(self) -> None:
        self.scalars: list[_Mention] = []
        self.picks: list[tuple[Category, int]] = []
        self.unknown: list[str] = []
        self.groups: list[list[str]] = []  # a content word with its intensity and negation words
        self.nouns: list[tuple[int, Attr | None, int]] = []  # (group, attribute, clause)
        self._clause = 0
        self._grade: int | None = None
        self._grade_words: list[str] = []
        self._negation: str | None = None
        self._keeps_grade = False
        self._last: _Word | None = None
        self._handlers: dict[Kind, Callable[[Token, Attr | None], None]] = {
            Kind.CONTENT: lambda token, _: self._content(token, token.entry),
            Kind.DIRECTION: self._direction,
            Kind.NOUN: self._noun,
            Kind.INTENSITY: self._intensity,
            Kind.NEGATION: lambda token, _: self._negate(token.text, keeps_grade=False),
            Kind.STOP: lambda token, _: None,
        }

    def _group(self, words: list[str]) -> int:
        self.groups.append(words)
        return len(self.groups) - 1

    def _noun(self, token: Token, _: Attr | None) -> None:
        assert token.entry is not None
        self.nouns.append((self._group([token.text]), token.entry.attr, self._clause))

    def result(self, style: Style, deciders: Sequence[tuple[int, str, int]]) -> ParsedInstruction:
        """Words split into rendered and not rendered by which groups decided a value."""
        decided = {group for group, _, _ in deciders}
        decided |= {g for g, attr, clause in self.nouns if any(a == attr and c == clause for _, a, c in deciders)}
        words = [(w, i in decided) for i, group in enumerate(self.groups) for w in group]
        renders = [(w, name) for group, name, _ in deciders for w in self.groups[group]]
        return ParsedInstruction(
            style,
            _unique(self.unknown),
            _unique([w for w, ok in words if ok]),
            _unique([w for w, ok in words if not ok and w not in {x for x, y in words if y}]),
            tuple(dict.fromkeys(renders)),
        )

    def read_clause(self, tokens: Sequence[Token]) -> None:
        bindings = _bind_directions(tokens)
        for index, token in enumerate(tokens):
            if token.entry is None:
                self.unknown.append(token.text)
            else:
                self._handlers[token.entry.kind](token, bindings.get(index))
        self._end_clause()

    def _content(self, token: Token, entry: LexEntry | None) -> None:
        assert entry is not None
        shift = 0 if self._grade is None else self._grade - PLAIN
        word = _Word(
            entry,
            shift,
            negated=self._negation is not None,
            keeps_grade=self._keeps_grade,
            explicit=self._grade is not None,
            scalar_start=len(self.scalars),
            pick_start=len(self.picks),
            clause=self._clause,
            group=self._group([*self._grade_words, *([self._negation] if self._negation else []), token.text]),
        )
        self._grade, self._grade_words, self._negation, self._keeps_grade = None, [], None, False
        self._emit(word)

    def _emit(self, word: _Word) -> None:
        """Append the word's mentions; called again with a new shift when a postfix intensity follows."""
        del self.scalars[word.scalar_start :], self.picks[word.pick_start :]
        for effect in word.entry.effects:
            mention = _mention(effect, word)
            if mention is not None:
                self.scalars.append(mention)
        if not word.negated:
            self.picks.extend((category, word.group) for category in word.entry.categories)
            if word.shift > 0:  # "very sad" also sounds slower and softer than "sad"
                grade = min(word.shift, PLAIN)
                self.scalars.extend(
                    _Mention(e.attr, e.direction, grade, False, word.clause, group=word.group)
                    for e in word.entry.emphasis
                )
        self._last = word

    def _direction(self, token: Token, bound: Attr | None) -> None:
        entry = token.entry
        assert entry is not None
        attr = bound or entry.attr
        if attr is not None:
            self._content(token, LexEntry(Kind.CONTENT, effects=(fx(attr, entry.direction, entry.grade),)))
        elif entry.fallback is Kind.NEGATION:
            self._negate(token.text, keeps_grade=True)
        elif entry.fallback is Kind.STOP:
            self._group([token.text])
        else:
            self.unknown.append(token.text)

    def _intensity(self, token: Token, _: Attr | None) -> None:
        entry = token.entry
        assert entry is not None
        last = self._last
        if entry.postfix and last is not None and last.clause == self._clause and self._grade is None:
            self.groups[last.group].append(token.text)
            self._emit(replace(last, shift=entry.grade - PLAIN, explicit=True))
            return
        if self._grade is not None and self._grade >= entry.grade > PLAIN:
            self._grade = clamp_grade(self._grade + 1)  # "very very", "非常非常"
        else:
            self._grade = entry.grade
        self._grade_words.append(token.text)

    def _negate(self, text: str, keeps_grade: bool) -> None:
        if self._negation is not None:
            self.unknown.append(self._negation)
        self._negation, self._keeps_grade = text, keeps_grade

    def _end_clause(self) -> None:
        last = self._last
        if self._grade is not None:
            if last is not None and not last.explicit and not last.negated:
                self.groups[last.group].extend(self._grade_words)
                self._emit(replace(last, shift=self._grade - PLAIN, explicit=True))
            else:
                self.unknown.extend(self._grade_words)
        if self._negation is not None:
            self.unknown.append(self._negation)
        self._sign_numbers()
        self._grade, self._grade_words, self._negation, self._keeps_grade = None, [], None, False
        self._clause += 1

    def _sign_numbers(self) -> None:
        """'lower the pitch by 2 semitones': an unsigned number follows the clause's word on that attribute."""
        here = [m for m in self.scalars if m.clause == self._clause]
        for mention in here:
            if mention.unsigned and mention.value is not None:
                words = [m for m in here if m.attr is mention.attr and m.value is None and m.direction != 0]
                sign = words[-1].direction if words else 1
                mention.value, mention.direction, mention.unsigned = sign * abs(mention.value), sign, False


def _mention(effect: Effect, word: _Word) -> _Mention | None:
    """The mention an effect makes in context, or None when negation leaves nothing to say."""
    if effect.value is not None:
        unsigned = effect.attr is not Attr.SPEED and effect.direction == 0
        return _Mention(
            effect.attr, effect.direction, PLAIN, True, word.clause, effect.value, unsigned, group=word.group
        )
    if word.negated:
        if effect.direction == 0:
            return None
        grade = clamp_grade(SLIGHT + word.shift) if word.keeps_grade else SLIGHT
        return _Mention(
            effect.attr, -effect.direction, grade, effect.primary, word.clause, negated=True, group=word.group
        )
    grade = clamp_grade(effect.grade + word.shift)
    if not effect.primary:
        grade = min(grade, effect.grade)  # intensity can soften a hint, never strengthen it
    return _Mention(effect.attr, effect.direction, grade, effect.primary, word.clause, group=word.group)


def _clauses(tokens: Sequence[Token]) -> list[list[Token]]:
    clauses: list[list[Token]] = [[]]
    for token in tokens:
        if token.entry is not None and token.entry.kind is Kind.BOUNDARY:
            clauses.append([])
        else:
            clauses[-1].append(token)
    return [c for c in clauses if c]


def _bind_directions(tokens: Sequence[Token]) -> dict[int, Attr]:
    """Each direction word takes the attribute of the nearest noun in its clause (English prefers the
    noun after it, "higher pitch"; Chinese the one before, "音量大")."""
    nouns = [(i, t.entry.attr) for i, t in enumerate(tokens) if t.entry and t.entry.kind is Kind.NOUN]
    bindings: dict[int, Attr] = {}
    for i, token in enumerate(tokens):
        if not nouns or token.entry is None or token.entry.kind is not Kind.DIRECTION:
            continue
        prefer_after = token.lang != "zh"
        _, attr = min(nouns, key=lambda n: (abs(n[0] - i), (n[0] > i) != prefer_after))
        if attr is not None:
            bindings[i] = attr
    return bindings


def _resolve(
    scalars: Sequence[_Mention], picks: Sequence[tuple[Category, int]]
) -> tuple[Style, list[tuple[int, str, int]]]:
    """The style, and (group, Style field, clause) for every mention or pick that decided a value."""
    values: dict[str, Any] = {}
    deciders: list[tuple[int, str, int]] = []
    for attr in Attr:
        mentions = [m for m in scalars if m.attr is attr]
        if mentions:
            value, chosen = _resolve_scalar(attr, mentions)
            values[attr.value] = round(value, 3)
            deciders.extend((m.group, attr.value, m.clause) for m in chosen)
    for name in (f.name for f in fields(Style)):
        chosen_picks = [p for p in picks if p[0].attr == name]
        tier = [p for p in chosen_picks if p[0].primary] or chosen_picks
        if tier:
            values[name] = tier[-1][0].value
            deciders.append((tier[-1][1], name, -1))
    return Style(**values), deciders


def _resolve_scalar(attr: Attr, mentions: Sequence[_Mention]) -> tuple[float, list[_Mention]]:
    numbers = [m for m in mentions if m.value is not None]
    if numbers:
        return clamp(attr, float(numbers[-1].value or 0.0)), [numbers[-1]]
    tier = [m for m in mentions if m.primary] or list(mentions)
    last = tier[-1]
    moving = [m for m in tier if m.direction != 0]
    if len({m.direction for m in moving}) == 2 and all(m.negated for m in moving):
        return NEUTRAL[attr], moving  # "not too slow, not too fast"
    if last.direction == 0:
        return NEUTRAL[attr], [last]
    same = [m for m in tier if m.direction == last.direction]
    steps = [level(attr, m.direction, m.grade) for m in same]
    value = max(steps) if last.direction > 0 else min(steps)
    return value, [m for m, step in zip(same, steps, strict=True) if step == value]


def _unique(items: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))
