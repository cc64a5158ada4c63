"""First audio first (voicelab/backends/cosyvoice/first_audio.py): a streamed request's later chunks wait while
another request waits for its first audio, never longer than the bound, and only a request's first segment opens.
Against the test doubles of upstream (tests/fixture_cosyvoice_upstream.py), on the CPU."""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import torch

from tests.fixture_cosyvoice_upstream import fake_runtime
from tests.test_cosyvoice_adapter import backend, model_of, prompt
from voicelab.backends.base import SpeechRequest
from voicelab.backends.cosyvoice.first_audio import FirstAudioFirst
from voicelab.backends.cosyvoice.modes import plan_mode
from voicelab.backends.cosyvoice.upstream import UpstreamRuntime

LONG = "A sentence long enough for several streamed chunks of audio, really it is."


def _in_thread(work: Iterator[np.ndarray]) -> tuple[threading.Thread, threading.Event]:
    """``next(work)`` on a thread of its own; the event is set once it returned."""
    returned = threading.Event()

    def run() -> None:
        next(work)
        returned.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, returned


def _streamed(runtime: UpstreamRuntime, opens: bool) -> Generator[np.ndarray, None, None]:
    """One streamed request of the long sentence in cross-lingual mode (a prompt without transcript)."""
    entry = runtime.speaker(np.zeros(3 * 16000, np.float32))
    model_input = runtime.inputs(plan_mode(2, "", ""), LONG, entry)
    chunks = runtime.run(model_input, stream=True, speed=1.0, seed=1, opens=opens)
    return cast(Generator[np.ndarray, None, None], chunks)


def test_a_later_chunk_waits_until_the_newcomer_has_its_first_audio() -> None:
    runtime = fake_runtime()
    runtime.first_audio.most_wait_s = 30.0
    playing = _streamed(runtime, opens=True)
    next(playing)  # its first chunk: it no longer counts as waiting
    assert runtime.first_audio.waiting == 0
    with runtime.first_audio.opening() as newcomer:
        thread, returned = _in_thread(playing)
        assert not returned.wait(0.3), "the later chunk was made while a newcomer waited for its first audio"
        newcomer.done()
        assert returned.wait(30), "the later chunk never came after the newcomer's first audio"
    thread.join(5)
    playing.close()
    assert runtime.first_audio.held_s > 0


def test_the_wait_is_bounded_and_off_means_no_wait() -> None:
    order = FirstAudioFirst(most_wait_s=0.05)
    with order.opening():  # a newcomer that never makes its first audio
        assert 0.05 <= order.before_later_chunk() < 5
        order.enabled = False
        assert order.before_later_chunk() == 0.0
    assert order.waiting == 0


def test_only_a_requests_first_segment_opens_and_every_opening_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = backend(tmp_path)
    runtime = b._loaded()
    seen: list[int] = []  # requests waiting for their first audio at each token-to-wave call
    wave = model_of(b).token2wav

    def token2wav(**kwargs: Any) -> torch.Tensor:
        seen.append(runtime.first_audio.waiting)
        return wave(**kwargs)

    monkeypatch.setattr(model_of(b), "token2wav", token2wav)
    text = f"{LONG} Then a second sentence."
    chunks = list(b.synthesize(SpeechRequest(text, "en", prompt=prompt())))
    assert len(chunks) >= 4 and runtime.first_audio.waiting == 0
    assert seen[0] == 1 and all(n == 0 for n in seen[1:])  # the second sentence's first chunk is a later chunk


def test_with_one_slot_a_waiting_first_chunk_goes_before_waiting_later_chunks() -> None:
    order = FirstAudioFirst(slots=1)
    served: list[str] = []
    playing = order.slot(first=False)
    playing.__enter__()  # a later chunk on the device: the one slot is taken

    def call(name: str, first: bool) -> threading.Thread:
        def run() -> None:
            with order.slot(first=first):
                served.append(name)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    later = call("later", first=False)
    threading.Event().wait(0.2)  # the later chunk queues behind the call in flight
    first = call("first", first=True)
    threading.Event().wait(0.2)
    assert served == [] and order.running == 1
    playing.__exit__(None, None, None)
    later.join(5), first.join(5)
    assert served == ["first", "later"]  # the newcomer's first chunk took the freed slot
    assert order.running == 0


def test_without_slots_calls_are_not_bounded() -> None:
    order = FirstAudioFirst()
    with order.slot(first=False), order.slot(first=False), order.slot(first=True):
        assert order.running == 0  # unbounded: nothing counted, nothing waits
