"""Chunks through their plans' voice transforms, as few renderer calls as the stream allows.

On a GPU the device renderers are launch-bound: ``pulse`` took ~16 ms per call on the H200 whether it voiced one
4 s chunk or several (docs/benchmarks.md), so the call count, not the audio, sets a cloned request's time. Chunks
that are ready together are therefore voiced as one padded batch: those one device batch made for several jobs
(``render_many``), and a request's chunks after its first (``voiced_chunks``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from voicelab.backends.base import AudioChunk
from voicelab.engine.voicing import VoicePlan
from voicelab.voice.dsp import VoiceTransform, apply_transforms

# A request's later chunks voiced together at most: a padded batch's memory grows with its rows (a 3,000-character
# text has some 30 chunks), and each batch waits for its last chunk's synthesis before any of it streams.
REST_ROWS = 8


def render_many(items: Sequence[tuple[VoicePlan, AudioChunk]]) -> list[np.ndarray]:
    """Each chunk through its plan's transform; on a GPU those that move as one padded batch per device, renderer
    and rate, so the chunks one device batch made for several jobs cost one launch sequence, not one each. On a
    CPU one by one: a padded batch of eight 4 s chunks took 2.3x as long as the eight alone (memory, not launches)."""
    out = [chunk.audio for _, chunk in items]
    transforms = [plan.transform_for(chunk.language) for plan, chunk in items]
    groups: dict[tuple[str, str, int, int], list[int]] = {}
    for k, ((plan, chunk), transform) in enumerate(zip(items, transforms, strict=True)):
        if transform != VoiceTransform.identity():
            alone = -1 if plan.device.startswith("cuda") else k  # a CPU row is a group of its own
            groups.setdefault((plan.device, plan.renderer, chunk.sample_rate, alone), []).append(k)
    for (device, renderer, sample_rate, _), ks in groups.items():
        pieces = [items[k][1].audio for k in ks]
        analyser = items[ks[0]][0].analyser  # one stage's plans: one analyser
        rendered = apply_transforms(pieces, sample_rate, [transforms[k] for k in ks], device, renderer, analyser)
        for k, audio in zip(ks, rendered, strict=True):
            out[k] = audio
    return out


def voiced_chunks(plan: VoicePlan, chunks: Iterable[AudioChunk]) -> Iterator[tuple[AudioChunk, np.ndarray | None]]:
    """Each chunk of one request with its voiced audio, or None where the caller voices it alone.

    The first chunk always goes alone, at once: it is the request's first audio. Where the plan moves the voice on
    a GPU, the rest are then synthesised back to back and voiced ``REST_ROWS`` at a time; they still arrive long
    before the first chunk has finished playing (a built-in voice's chunk is seconds of speech, its synthesis
    milliseconds). Otherwise each chunk streams as soon as it is made: on a CPU synthesis is slow and batching saves
    nothing (``render_many``), and a plan that moves nothing (a backend that clones or styles by itself, however
    slowly it speaks) has nothing to batch."""
    stream = iter(chunks)
    first = next(stream, None)
    if first is None:
        return
    yield first, None
    moves = any(transform != VoiceTransform.identity() for transform in plan.transforms.values())
    if not plan.device.startswith("cuda") or not moves:
        yield from ((chunk, None) for chunk in stream)
        return
    while batch := list(itertools.islice(stream, REST_ROWS)):
        yield from zip(batch, render_many([(plan, chunk) for chunk in batch]), strict=True)
