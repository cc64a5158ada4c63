"""The DNSMOS quality judge: it hears noise, scores clean speech plausibly, and windows clips as documented."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.gpu_needs import needs
from voicelab.errors import BackendLoadError
from voicelab.judges.dnsmos import HOP, JUDGE_RATE, WINDOW, DnsmosJudge, mapped, windows
from voicelab.voice.analysis import resample

DATA = Path(__file__).resolve().parent / "data"
DNSMOS = needs("speechmos", "the DNSMOS quality judge's ONNX model")


@pytest.fixture(scope="module")
def judge() -> DnsmosJudge:
    return DnsmosJudge(threads=2)


def clip(name: str) -> tuple[np.ndarray, int]:
    audio, sr = sf.read(DATA / f"{name}.wav", dtype="float32")
    return np.asarray(audio), int(sr)


def with_noise(audio: np.ndarray, snr_db: float) -> np.ndarray:
    """White noise at ``snr_db`` against the clip's mean power, the sum scaled back under full scale."""
    noise = np.random.default_rng(0).normal(0.0, 1.0, len(audio))
    noise *= np.sqrt(np.mean(audio.astype(np.float64) ** 2) / np.mean(noise**2) / 10 ** (snr_db / 10))
    noisy = audio + noise
    return (noisy * (0.9 / max(np.abs(noisy).max(), 0.9))).astype(np.float32)


@DNSMOS
@pytest.mark.parametrize("name", ["arctic_slt_en_female", "arctic_awb_en_male"])
def test_clean_speech_scores_clearly_above_the_same_speech_in_noise(judge: DnsmosJudge, name: str) -> None:
    audio, sr = clip(name)
    clean, noisy = judge.score_many([audio, with_noise(audio, 0.0)], sr)
    assert clean.ovrl > noisy.ovrl + 1.0, (clean, noisy)
    assert clean.bak > noisy.bak + 1.5, (clean, noisy)
    assert 2.5 <= clean.ovrl <= 4.5, clean  # real, clean studio speech: "fair" to "good"
    assert 3.0 <= clean.bak <= 5.0 and 2.5 <= clean.sig <= 5.0, clean
    assert 1.0 <= noisy.bak <= 2.2, noisy  # white noise at 0 dB is a "bad" background


@DNSMOS
def test_any_sample_rate_is_scored_at_16_khz(judge: DnsmosJudge) -> None:
    audio, sr = clip("arctic_slt_en_female")
    at_16k = judge.score(audio, sr)
    at_24k = judge.score(resample(audio, sr, 24000), 24000)
    assert abs(at_24k.ovrl - at_16k.ovrl) < 0.05 and abs(at_24k.bak - at_16k.bak) < 0.05


def test_windows_are_9_01_s_one_second_apart_and_short_clips_repeat() -> None:
    short = np.linspace(-0.5, 0.5, JUDGE_RATE * 3, dtype=np.float32)
    rows = windows(short, JUDGE_RATE)
    assert rows.shape == (1, WINDOW)
    np.testing.assert_array_equal(rows[0, len(short) : 2 * len(short)], short)  # repeated, not zero-padded
    long = np.zeros(WINDOW + 2 * HOP + 5, np.float32)
    assert windows(long, JUDGE_RATE).shape == (3, WINDOW)
    assert windows(np.full(8000, 3.0), 8000).max() == 1.0  # resampled to 16 kHz, clipped to full scale
    for bad in (np.zeros(0), np.zeros((2, 100)), np.array([0.0, np.nan])):
        with pytest.raises(ValueError):
            windows(bad, JUDGE_RATE)


def test_the_mapping_is_the_references_non_personalised_polynomial() -> None:
    sig, bak, ovrl = mapped(np.array([[3.0, 3.0, 3.0]]))[0]
    assert sig == pytest.approx(-0.08397278 * 9 + 1.22083953 * 3 + 0.0052439)
    assert bak == pytest.approx(-0.13166888 * 9 + 1.60915514 * 3 - 0.39604546)
    assert ovrl == pytest.approx(-0.06766283 * 9 + 1.11546468 * 3 + 0.04602535)


def test_an_unreadable_model_is_a_typed_error(tmp_path: Path) -> None:
    broken = tmp_path / "sig_bak_ovr.onnx"
    broken.write_bytes(b"not a model")
    judge = DnsmosJudge(model_path=broken)
    with pytest.raises(BackendLoadError, match="DNSMOS"):
        judge.score(np.zeros(JUDGE_RATE, np.float32), JUDGE_RATE)
    assert not judge.loaded
