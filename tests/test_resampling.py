"""The device resampler the GPU's clone scoring uses gives what ``scipy.signal.resample_poly`` gives.

On a GPU the scorer resamples output and draft to 16 kHz with ``voice.resampling`` instead of the host's
``resample_poly`` (the largest share of the scoring on an H200); the similarity users see must not move with it, so
the two are held to the same samples, a padded batch to each row alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from voicelab.voice.analysis import resample
from voicelab.voice.resampling import resample_rows

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize(("sr_from", "sr_to"), [(22050, 16000), (24000, 16000), (44100, 16000), (16000, 22050)])
def test_the_same_samples_as_resample_poly(sr_from: int, sr_to: int) -> None:
    speech, sr = sf.read(DATA / "arctic_slt_en_female.wav", dtype="float32")
    clip = resample(speech, sr, sr_from)[: sr_from * 2 + 17]  # two seconds and an odd tail
    ours = resample_rows(torch.from_numpy(clip).unsqueeze(0), sr_from, sr_to)[0].numpy()
    theirs = resample(clip, sr_from, sr_to)
    assert ours.shape == theirs.shape
    assert np.abs(ours - theirs).max() < 1e-5 * np.abs(theirs).max()


def test_a_padded_batch_equals_each_row_alone() -> None:
    rng = np.random.default_rng(3)
    rows = [rng.standard_normal(n).astype(np.float32) for n in (22050, 9001, 441)]
    batch = torch.zeros(len(rows), max(len(r) for r in rows))
    for k, row in enumerate(rows):
        batch[k, : len(row)] = torch.from_numpy(row)
    together = resample_rows(batch, 22050, 16000).numpy()
    for k, row in enumerate(rows):
        alone = resample(row, 22050, 16000)
        assert np.abs(together[k, : len(alone)] - alone).max() < 1e-5


def test_equal_rates_are_left_alone() -> None:
    x = torch.randn(2, 100)
    assert torch.equal(resample_rows(x, 16000, 16000), x)
