"""The HiFi-GAN vocoder and its mel front end: strict loading, and real speech re-synthesised keeps its words and
its speaker (the ``mel`` renderer's behaviour on pitch, formants and EQ is tested with the others in
test_voice_dsp.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from tests.judges import listen
from voicelab.errors import BackendLoadError
from voicelab.judges.ecapa import EcapaJudge
from voicelab.voice.encoder import mel_filterbank
from voicelab.voice.hifigan import find_weights, load_generator
from voicelab.voice.mel import MEL_RATE, MelFrontEnd, MelGrid, resample_rows

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def speech() -> tuple[np.ndarray, str]:
    """CMU ARCTIC awb at the vocoder's rate, and what he says."""
    audio, sr = sf.read(DATA / "arctic_awb_en_male.wav", dtype="float32")
    x = resample_rows(torch.from_numpy(audio).unsqueeze(0), sr, MEL_RATE)[0].numpy()
    return x, (DATA / "arctic_awb_en_male.txt").read_text(encoding="utf-8").strip()


@pytest.fixture(scope="module")
def state() -> dict[str, torch.Tensor]:
    checkpoint = torch.load(find_weights(), map_location="cpu", weights_only=True)
    return dict(checkpoint["generator"])


def test_resynthesised_speech_keeps_its_words_length_and_speaker(speech: tuple[np.ndarray, str]) -> None:
    audio, text = speech
    front, generator = MelFrontEnd("cpu"), load_generator("cpu")
    with torch.inference_mode():
        out = generator(front.of_audio(torch.from_numpy(audio).unsqueeze(0)))[0].numpy()
    assert abs(len(out) - len(audio)) < MelGrid().hop
    heard = listen(text, out, MEL_RATE, "en")
    assert heard.rate <= 0.1, heard.describe()
    judge = EcapaJudge("cpu")
    similarity = judge.similarities([out], MEL_RATE, [judge.embed(audio, MEL_RATE)])[0]
    assert similarity > 0.85  # two recordings of one person score 0.5-0.85


@pytest.mark.parametrize("change", ["missing", "extra", "shape"])
def test_a_tampered_checkpoint_names_what_differs(state: dict[str, torch.Tensor], tmp_path: Path, change: str) -> None:
    tampered = dict(state)
    if change == "missing":
        del tampered["conv_post.bias"]
    elif change == "extra":
        tampered["conv_post.extra"] = torch.zeros(1)
    else:
        tampered["conv_post.bias"] = torch.zeros(2)
    path = tmp_path / "generator.pth.tar"
    torch.save({"generator": tampered}, path)
    with pytest.raises(BackendLoadError, match="conv_post"):
        load_generator("cpu", path)


def test_a_file_that_is_no_checkpoint_is_one_sentence(tmp_path: Path) -> None:
    path = tmp_path / "generator.pth.tar"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(BackendLoadError, match="could not be read"):
        load_generator("cpu", path)


def test_the_mel_filters_stop_at_8_khz_and_each_has_unit_area() -> None:
    grid = MelGrid()
    filters = mel_filterbank(grid.sample_rate, grid.n_fft, grid.n_mels, grid.f_max)
    freqs = np.linspace(0.0, grid.sample_rate / 2.0, grid.bins)
    assert filters.shape == (80, 513)
    assert not filters[:, freqs > grid.f_max].any()
    areas = filters.sum(axis=1) * (freqs[1] - freqs[0])
    assert np.allclose(areas, 1.0, atol=0.1)  # sampled on 21.5 Hz bins: the narrow low filters only roughly


def test_resampling_there_and_back_keeps_a_tone() -> None:
    t = np.arange(16000) / 16000.0
    tone = torch.from_numpy(np.sin(2 * np.pi * 440.0 * t).astype(np.float32)).unsqueeze(0)
    up = resample_rows(tone, 16000, MEL_RATE)
    assert up.shape[-1] == MEL_RATE
    back = resample_rows(up, MEL_RATE, 16000)
    assert back.shape == tone.shape
    assert float((back - tone)[:, 200:-200].abs().max()) < 1e-2
