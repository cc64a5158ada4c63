"""Profile affinity with two workers: a voice's next request goes to the worker that already holds its
speaker profile (the user notices: no second profile build, the panel's hit rate rises on that device)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from voicelab.engine.client import EngineClient
from voicelab.engine.messages import SynthesisRequest
from voicelab.settings import Settings
from voicelab.voice.intake import load_prompt

NATIVE = "tests.fixture_native_backend:create"
DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def pair() -> Iterator[EngineClient]:
    settings = Settings(backend=NATIVE, devices="cpu,cpu", job_timeout_s=120.0, torch_threads=1)
    with EngineClient(settings) as engine:
        engine.wait_ready(timeout=180)
        yield engine


def test_the_same_voice_goes_back_to_the_worker_holding_its_profile(pair: EngineClient) -> None:
    prompt = load_prompt(DATA / "arctic_slt_en_female.wav")
    first = pair.synthesize(SynthesisRequest("The first line.", prompt=prompt), timeout=180)
    assert first.profile_cache is not None and (first.profile_cache.misses, first.profile_cache.hits) == (1, 0)
    # Both workers are idle: without affinity the one idle longest (the other) would take it and build again.
    second = pair.synthesize(SynthesisRequest("The second line.", prompt=prompt), timeout=180)
    assert second.profile_cache is not None and (second.profile_cache.misses, second.profile_cache.hits) == (1, 1)
    holders = [w.index for w in pair.status().workers if w.completed]
    assert len(holders) == 1
    # A request without a voice goes to the other, idle worker.
    pair.synthesize(SynthesisRequest("No voice at all."), timeout=180)
    assert [w.completed for w in pair.status().workers] == ([2, 1] if holders == [0] else [1, 2])
