"""A request's chunks through the voice transform: the first alone and at once, the rest batched on a GPU."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from voicelab.backends.base import AudioChunk, SpeechRequest
from voicelab.engine import chunk_render
from voicelab.engine.chunk_render import REST_ROWS, voiced_chunks
from voicelab.engine.voicing import VoicePlan
from voicelab.voice import pulse
from voicelab.voice.dsp import VoiceTransform, apply_transform, apply_transforms

DATA = Path(__file__).parent / "data"
RAISED = VoiceTransform(pitch_semitones=4.0, gain_db=-3.0)


def _plan(device: str) -> VoicePlan:
    return VoicePlan(SpeechRequest("text", "en"), {"en": RAISED}, None, True, device=device, renderer="pulse")


def _chunks(count: int) -> list[AudioChunk]:
    speech, sr = sf.read(DATA / "arctic_awb_en_male.wav", dtype="float32")
    step = sr // 4  # quarter-second pieces of real speech, each a different length
    return [AudioChunk(speech[k * step : (k + 2) * step + 97 * k], sr, f"chunk {k}", "en") for k in range(count)]


def _pulled(chunks: Sequence[AudioChunk], log: list[str]) -> Iterator[AudioChunk]:
    for chunk in chunks:
        log.append(f"made {chunk.text}")
        yield chunk


def test_on_a_gpu_the_first_chunk_goes_alone_at_once_and_the_rest_in_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    rows: list[int] = []

    def on_this_cpu(pieces: Sequence[np.ndarray], sr: int, transforms: Sequence[VoiceTransform], device: str,
                    renderer: str, analyser: pulse.Analyser) -> list[np.ndarray]:  # fmt: skip
        assert device == "cuda" and analyser is pulse.analyse  # the plan's
        rows.append(len(pieces))
        return apply_transforms(pieces, sr, transforms, "cpu", renderer, analyser)

    monkeypatch.setattr(chunk_render, "apply_transforms", on_this_cpu)
    chunks, log = _chunks(REST_ROWS + 3), []
    stream = voiced_chunks(_plan("cuda"), _pulled(chunks, log))
    first, rendered = next(stream)
    assert first is chunks[0] and rendered is None  # the caller voices it alone, before the backend makes more
    assert log == ["made chunk 0"]
    rest = list(stream)
    assert [chunk for chunk, _ in rest] == chunks[1:]
    assert rows == [REST_ROWS, 2]
    for chunk, audio in rest:
        alone = apply_transform(chunk.audio, chunk.sample_rate, RAISED, "cpu", "pulse")
        assert audio is not None and audio.shape == chunk.audio.shape
        assert float(np.sqrt(np.mean((audio - alone) ** 2))) < 1e-3 * max(float(np.sqrt(np.mean(alone**2))), 1e-6)


def test_on_a_cpu_every_chunk_streams_as_soon_as_it_is_made() -> None:
    chunks, log = _chunks(4), []
    for number, (chunk, rendered) in enumerate(voiced_chunks(_plan("cpu"), _pulled(chunks, log))):
        assert chunk is chunks[number] and rendered is None
        assert log[-1] == f"made chunk {number}"  # nothing synthesised ahead of what was handed on


def test_a_plan_that_moves_nothing_streams_every_chunk_as_it_is_made_on_a_gpu_too() -> None:
    plan = replace(_plan("cuda"), transforms={"en": VoiceTransform.identity()})  # a backend that clones by itself
    chunks, log = _chunks(4), []
    for number, (chunk, rendered) in enumerate(voiced_chunks(plan, _pulled(chunks, log))):
        assert chunk is chunks[number] and rendered is None
        assert log[-1] == f"made chunk {number}"


def test_no_chunks_give_nothing() -> None:
    assert list(voiced_chunks(_plan("cuda"), iter(()))) == []
