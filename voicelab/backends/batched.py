"""Several requests in one padded device batch: each request's stream groups, round by round, packed together.

A sentence backend streams a request as groups of sentences (``batching.stream_groups``: the first sentence
alone, then neighbours). Here round r runs the r-th group of every request still going, so every request's
first sentence is in the first device batch and its first chunk goes out before anyone's second. A group
("unit") is never split: its rows keep the order the backend's one-request path gives them, so a request's
random draws happen in the same order as when it runs alone. Units are packed into device batches under the
same padded-size budget and length ratio as one request's batches, so a batch needs no more memory than the
largest batch one request could make. Torch-free.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from voicelab.backends.base import AudioChunk, BatchEvent, MemoryGuard
from voicelab.backends.batching import BatchPolicy, SentenceIds, stream_groups

log = logging.getLogger(__name__)

# Rows as (request index, ids), one waveform back per row, in order.
RunRows = Callable[[Sequence[tuple[int, Sequence[int]]]], list[np.ndarray]]


@dataclass(frozen=True)
class ChunkFormat:
    """How one request's chunks are made: sample rate, language, silence before every sentence but the first."""

    sample_rate: int
    language: str
    silence_s: float


@dataclass(frozen=True)
class Unit:
    """One request's group for this round: sentence indices in text order, and the order its rows run in."""

    request: int
    sentences: tuple[int, ...]
    row_order: tuple[int, ...]  # positions in ``sentences``, longest first (as bucket_by_length orders them)
    first: bool  # the request's first group (its first sentence gets no silence before it)
    last: bool


def units_for_round(groups: Sequence[list[list[int]] | None], lengths: Sequence[Sequence[int]], r: int) -> list[Unit]:
    units = []
    for request, request_groups in enumerate(groups):
        if request_groups is None or r >= len(request_groups):
            continue
        group = request_groups[r]
        order = tuple(sorted(range(len(group)), key=lambda k: -lengths[request][group[k]]))
        units.append(Unit(request, tuple(group), order, r == 0, r == len(request_groups) - 1))
    return units


def pack_units(units: Sequence[Unit], lengths: Sequence[Sequence[int]], policy: BatchPolicy) -> list[list[Unit]]:
    """Device batches of whole units: rows x longest within the padded budget, lengths within the ratio."""

    def longest(unit: Unit) -> int:
        return max(lengths[unit.request][i] for i in unit.sentences)

    def shortest(unit: Unit) -> int:
        return min(lengths[unit.request][i] for i in unit.sentences)

    batches: list[list[Unit]] = []
    for unit in sorted(units, key=lambda u: -longest(u)):  # stable: equal lengths keep request order
        if batches:
            batch = batches[-1]
            rows = sum(len(u.sentences) for u in batch) + len(unit.sentences)
            top = longest(batch[0])
            if rows * top <= policy.max_padded_ids and top <= policy.max_ratio * shortest(unit):
                batch.append(unit)
                continue
        batches.append([unit])
    return batches


def lockstep_chunks(
    sentences: Sequence[Sequence[SentenceIds] | None],
    run_rows: RunRows,
    guard: MemoryGuard,
    policy: BatchPolicy,
    formats: Sequence[ChunkFormat],
) -> Iterator[BatchEvent]:
    """Events for every request whose ``sentences`` is not None (None: it already failed)."""
    lengths = [[len(s.ids) for s in request] if request is not None else [] for request in sentences]
    groups = [
        stream_groups(n, policy) if request is not None else None for request, n in zip(sentences, lengths, strict=True)
    ]
    failed: set[int] = set()
    rounds = max((len(g) for g in groups if g is not None), default=0)
    for r in range(rounds):
        live = [u for u in units_for_round(groups, lengths, r) if u.request not in failed]
        for batch in pack_units(live, lengths, policy):
            errors: dict[int, Exception] = {}
            waves = _run_batch(batch, sentences, run_rows, guard, errors)
            for k, unit in enumerate(batch):
                end = k == len(batch) - 1  # the engine voices one device batch's chunks together
                if unit.request in errors:
                    failed.add(unit.request)
                    yield BatchEvent(unit.request, error=errors[unit.request], last=True, batch_end=end)
                    continue
                chunk = _join(unit, waves[unit.request], sentences, formats[unit.request])
                yield BatchEvent(unit.request, chunk=chunk, last=unit.last, batch_end=end)


def _rows(unit: Unit, sentences: Sequence[Sequence[SentenceIds] | None]) -> list[tuple[int, Sequence[int]]]:
    request = sentences[unit.request]
    assert request is not None
    return [(unit.request, request[unit.sentences[k]].ids) for k in unit.row_order]


def _run_batch(
    batch: list[Unit],
    sentences: Sequence[Sequence[SentenceIds] | None],
    run_rows: RunRows,
    guard: MemoryGuard,
    errors: dict[int, Exception],
) -> dict[int, list[np.ndarray]]:
    """Each unit's waveforms (in row order); a batch that fails is run unit by unit so only the culprit fails."""
    rows = [row for unit in batch for row in _rows(unit, sentences)]

    def full() -> list[np.ndarray]:
        return run_rows(rows)

    def pieces() -> list[np.ndarray]:
        return [wave for row in rows for wave in run_rows([row])]

    try:
        waves = guard(full, pieces)
    except Exception as exc:  # isolated: each unit again on its own
        if len(batch) == 1:
            errors[batch[0].request] = exc
            return {}
        log.warning("a batch of %d requests failed; running them one by one", len(batch), exc_info=True)
        alone = {unit.request: _run_alone(unit, sentences, run_rows, guard) for unit in batch}
        errors.update({i: result for i, result in alone.items() if isinstance(result, Exception)})
        return {i: result for i, result in alone.items() if not isinstance(result, Exception)}
    out: dict[int, list[np.ndarray]] = {}
    start = 0
    for unit in batch:
        out[unit.request] = waves[start : start + len(unit.sentences)]
        start += len(unit.sentences)
    return out


def _run_alone(
    unit: Unit,
    sentences: Sequence[Sequence[SentenceIds] | None],
    run_rows: RunRows,
    guard: MemoryGuard,
) -> list[np.ndarray] | Exception:
    rows = _rows(unit, sentences)
    try:
        return guard(lambda: run_rows(rows), lambda: [w for row in rows for w in run_rows([row])])
    except Exception as exc:  # this request's own failure, reported as its event
        return exc


def _join(
    unit: Unit, waves: list[np.ndarray], sentences: Sequence[Sequence[SentenceIds] | None], fmt: ChunkFormat
) -> AudioChunk:
    """The unit's waveforms back in text order, joined with the silence (none before the request's first)."""
    request = sentences[unit.request]
    assert request is not None
    in_text_order: list[np.ndarray] = [np.zeros(0, np.float32)] * len(unit.sentences)
    for wave, k in zip(waves, unit.row_order, strict=True):
        in_text_order[k] = wave
    gap = np.zeros(round(fmt.silence_s * fmt.sample_rate), dtype=np.float32)
    parts = [p for k, wave in enumerate(in_text_order) for p in ((wave,) if unit.first and k == 0 else (gap, wave))]
    text = " ".join(request[i].text for i in unit.sentences)
    return AudioChunk(np.concatenate(parts).astype(np.float32, copy=False), fmt.sample_rate, text, fmt.language)
