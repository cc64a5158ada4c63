"""Idle offload: after N idle minutes the worker drops the model, and the next job brings it back."""

from __future__ import annotations

import time

import numpy as np

from voicelab.engine.client import EngineClient
from voicelab.engine.messages import SynthesisRequest
from voicelab.settings import Settings


def test_idle_model_is_offloaded_and_the_next_job_reloads_it() -> None:
    settings = Settings(idle_offload_minutes=1.5 / 60, torch_threads=1)  # offload after 1.5 idle seconds
    with EngineClient(settings) as engine:
        engine.wait_ready()
        first = engine.synthesize(SynthesisRequest("Before the pause.", seed=1), timeout=120)
        deadline = time.monotonic() + 20
        while engine.status().model_loaded:
            assert time.monotonic() < deadline, "the idle model was never offloaded"
            time.sleep(0.2)
        assert engine.status().ready, "an offloaded model is still a ready engine"
        again = engine.synthesize(SynthesisRequest("Before the pause.", seed=1), timeout=120)
        assert np.array_equal(first.audio, again.audio), "the reloaded model speaks exactly as before"
        time.sleep(1.2)  # a heartbeat after the job
        assert engine.status().restarts == 0
