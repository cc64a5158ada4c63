"""How sentence-level backends group sentences into padded batches and stream them as chunks.

Shared by the Piper and Mandarin voices: ``bucket_by_length`` for one synthesis call (longest first, little
padding), ``stream_groups`` for streaming (the first sentence alone, then neighbours in text order), and
``grouped_chunks`` which runs the groups through a backend's own id-level synthesis under the engine's
``MemoryGuard`` and joins each group with the sentence silence. Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from voicelab.backends.base import AudioChunk, MemoryGuard

SynthesizeIds = Callable[[Sequence[Sequence[int]]], list[np.ndarray]]


@dataclass(frozen=True)
class BatchPolicy:
    """How sentences are grouped: lengths within ``max_ratio`` of the longest, and a padded-size budget."""

    max_ratio: float = 1.5
    max_padded_ids: int = 1024


@dataclass(frozen=True)
class SentenceIds:
    """One sentence as a backend's front end made it: its text (for the chunk) and its model input ids."""

    text: str
    ids: Sequence[int]


def bucket_by_length(lengths: Sequence[int], policy: BatchPolicy) -> list[list[int]]:
    """Group indices (longest first) so each batch pads little and stays under the padded-size budget."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches:
            batch = batches[-1]
            longest = lengths[batch[0]]
            fits = (len(batch) + 1) * longest <= policy.max_padded_ids
            if fits and longest <= policy.max_ratio * lengths[i]:
                batch.append(i)
                continue
        batches.append([i])
    return batches


def stream_groups(lengths: Sequence[int], policy: BatchPolicy) -> list[list[int]]:
    """Consecutive sentence indices in text order: the first sentence alone, then padded batches of neighbours."""
    groups: list[list[int]] = []
    for i, n in enumerate(lengths):
        if len(groups) > 1:
            group = groups[-1]
            longest, shortest = max(lengths[j] for j in group), min(lengths[j] for j in group)
            longest, shortest = max(longest, n), min(shortest, n)
            if (len(group) + 1) * longest <= policy.max_padded_ids and longest <= policy.max_ratio * shortest:
                group.append(i)
                continue
        groups.append([i])
    return groups


def grouped_chunks(
    sentences: Sequence[SentenceIds],
    synthesize_ids: SynthesizeIds,
    guard: MemoryGuard,
    policy: BatchPolicy,
    chunk: tuple[int, str, float],
    separator: str = " ",
) -> Iterator[AudioChunk]:
    """One chunk per stream group; ``chunk`` is (sample rate, language, sentence silence in seconds).

    Every sentence but the very first starts with the silence; after an out-of-memory error the guard runs
    the group again one sentence at a time.
    """
    sample_rate, language, silence_s = chunk
    gap = np.zeros(round(silence_s * sample_rate), dtype=np.float32)
    for number, group in enumerate(stream_groups([len(s.ids) for s in sentences], policy)):
        ids = [sentences[i].ids for i in group]

        def full(ids: list[Sequence[int]] = ids) -> list[np.ndarray]:
            return synthesize_ids(ids)

        def pieces(ids: list[Sequence[int]] = ids) -> list[np.ndarray]:
            return [wave for one in ids for wave in synthesize_ids([one])]

        waves = guard(full, pieces)
        parts = [part for k, wave in enumerate(waves) for part in ((gap, wave) if number or k else (wave,))]
        text = separator.join(sentences[i].text for i in group)
        yield AudioChunk(np.concatenate(parts).astype(np.float32, copy=False), sample_rate, text, language)
