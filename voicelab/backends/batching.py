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

CPU_PADDED_IDS = 256  # docs/host-memory.md: bounds a long job's peak RSS; batching buys no speed on CPU
SynthesizeIds = Callable[[Sequence[Sequence[int]]], list[np.ndarray]]


@dataclass(frozen=True)
class ShapeBuckets:
    """The padded shapes a batch may take: lengths (model input ids) and batch sizes, each rounded up.

    Bounded shapes keep per-shape state bounded (oneDNN primitives, cuDNN plans, CUDA graphs captured per
    shape); ``lengths`` must reach the policy's ``max_piece_ids`` so every sentence piece has a bucket.
    """

    lengths: tuple[int, ...] = (16, 32, 48, 64, 96, 128, 160, 192, 256)
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)

    def __post_init__(self) -> None:
        for name, sizes in (("lengths", self.lengths), ("batch_sizes", self.batch_sizes)):
            if not sizes or list(sizes) != sorted(set(sizes)) or sizes[0] < 1:
                raise ValueError(f"{name} must be distinct positive sizes in increasing order, got {sizes}")

    def length_for(self, n: int) -> int:
        """The smallest bucket that holds ``n`` ids (``n`` itself past the largest)."""
        return next((size for size in self.lengths if size >= n), n)

    def batch_for(self, n: int) -> int:
        """The smallest batch size that holds ``n`` rows (``n`` itself past the largest)."""
        return next((size for size in self.batch_sizes if size >= n), n)


@dataclass(frozen=True)
class BatchPolicy:
    """How sentences become device batches; every bound here bounds the memory one batch can take.

    max_ratio: lengths in a batch within this ratio of the longest (little padding).
    max_padded_ids: rows times the padded length stays under this (the decoder's activations scale with it).
    max_piece_ids: a sentence longer than this is synthesised in pieces cut at word boundaries, so a long
    text costs more pieces, not a bigger batch. max_batch: rows per batch. buckets: pad to bounded shapes.
    """

    max_ratio: float = 1.5
    max_padded_ids: int = 1024
    max_piece_ids: int = 256
    max_batch: int = 16
    buckets: ShapeBuckets | None = None

    def __post_init__(self) -> None:
        if self.max_ratio < 1 or min(self.max_padded_ids, self.max_piece_ids, self.max_batch) < 1:
            raise ValueError("max_ratio must be >= 1 and the id and batch budgets positive")

    @classmethod
    def for_device(cls, device: str) -> BatchPolicy:
        """CPU: one sentence piece per call (batching buys no speed there, memory grows with it); GPU: batches."""
        if device.startswith("cuda"):
            return cls()
        return cls(max_padded_ids=CPU_PADDED_IDS)

    def padded(self, rows: int, longest: int) -> int:
        """The ids a batch of ``rows`` sentences, the longest ``longest`` ids, occupies once padded."""
        if self.buckets is None:
            return rows * longest
        return self.buckets.batch_for(rows) * self.buckets.length_for(longest)

    def fits(self, rows: int, longest: int, shortest: int) -> bool:
        """Whether ``rows`` sentences of these extreme lengths may share one batch."""
        return (
            rows <= self.max_batch
            and self.padded(rows, longest) <= self.max_padded_ids
            and longest <= self.max_ratio * shortest
        )


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
        if batches and policy.fits(len(batches[-1]) + 1, lengths[batches[-1][0]], lengths[i]):
            batches[-1].append(i)
            continue
        batches.append([i])
    return batches


def stream_groups(lengths: Sequence[int], policy: BatchPolicy) -> list[list[int]]:
    """Consecutive sentence indices in text order: the first sentence alone, then padded batches of neighbours."""
    groups: list[list[int]] = []
    for i, n in enumerate(lengths):
        if len(groups) > 1:
            group = groups[-1]
            longest = max(n, *(lengths[j] for j in group))
            shortest = min(n, *(lengths[j] for j in group))
            if policy.fits(len(group) + 1, longest, shortest):
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
