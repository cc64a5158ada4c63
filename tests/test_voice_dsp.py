"""Voice transforms on real speech: pitch moves by the asked semitones, whisper loses its voicing, no clipping."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from voicelab.voice import dsp, world_render
from voicelab.voice.analysis import LTAS_BANDS, active_rms_dbfs, analyse_voice, f0_median_hz, pitch_track
from voicelab.voice.dsp import VoiceTransform, apply_transform

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def speech() -> tuple[np.ndarray, int]:
    audio, sr = sf.read(DATA / "arctic_awb_en_male.wav", dtype="float32")
    return audio, sr


Apply = Callable[..., np.ndarray]


@pytest.fixture(params=dsp.RENDERERS)
def apply(request: pytest.FixtureRequest) -> Apply:
    """``apply_transform`` through each renderer: WORLD (CPU), the STFT, PSOLA and mel (HiFi-GAN) ones (any device)."""
    return functools.partial(apply_transform, renderer=request.param)


def _semitones(a: float, b: float) -> float:
    return 12.0 * float(np.log2(b / a))


def test_pitch_up_four_semitones_raises_f0_by_four_semitones(speech: tuple[np.ndarray, int], apply: Apply) -> None:
    audio, sr = speech
    out = apply(audio, sr, VoiceTransform(pitch_semitones=4.0))
    assert _semitones(f0_median_hz(audio, sr), f0_median_hz(out, sr)) == pytest.approx(4.0, abs=0.5)
    assert len(out) == len(audio) and out.dtype == np.float32


def test_f0_target_lands_on_the_target(speech: tuple[np.ndarray, int], apply: Apply) -> None:
    audio, sr = speech
    out = apply(audio, sr, VoiceTransform(f0_target_hz=200.0))
    assert f0_median_hz(out, sr) == pytest.approx(200.0, rel=0.05)


def test_pitch_range_widens_the_f0_spread(speech: tuple[np.ndarray, int], apply: Apply) -> None:
    audio, sr = speech
    # The interquartile spread: Praat hears 5 % of this recording's frames near 400 Hz (octave errors that a
    # phase vocoder keeps as they are), which swamps a 5-95 % range.
    flat = _iqr_st(apply(audio, sr, VoiceTransform(pitch_range=0.5)), sr)
    lively = _iqr_st(apply(audio, sr, VoiceTransform(pitch_range=1.5)), sr)
    assert lively > flat * 1.8


def _iqr_st(audio: np.ndarray, sr: int) -> float:
    f0 = pitch_track(audio, sr)
    low, high = np.percentile(f0[f0 > 0], [25, 75])
    return float(12.0 * np.log2(high / low))


def _centroid_below_4k(audio: np.ndarray, sr: int) -> float:
    power = np.abs(np.fft.rfft(audio)) ** 2
    freqs = np.fft.rfftfreq(len(audio), 1.0 / sr)
    keep = freqs < 4000.0
    return float((power[keep] * freqs[keep]).sum() / power[keep].sum())


def test_formant_factor_raises_formants(speech: tuple[np.ndarray, int], apply: Apply) -> None:
    audio, sr = speech
    out = apply(audio, sr, VoiceTransform(formant_factor=1.2))
    assert analyse_voice(out, sr).formants_hz[0] > analyse_voice(audio, sr).formants_hz[0] * 1.12
    assert _centroid_below_4k(out, sr) > _centroid_below_4k(audio, sr) * 1.08
    assert f0_median_hz(out, sr) == pytest.approx(f0_median_hz(audio, sr), rel=0.03)  # pitch stays


def test_whisper_has_almost_no_voiced_frames_at_the_same_loudness(speech: tuple[np.ndarray, int], apply: Apply) -> None:
    audio, sr = speech
    assert analyse_voice(audio, sr).voiced_ratio > 0.4
    out = apply(audio, sr, VoiceTransform(whisper=True))
    assert analyse_voice(out, sr).voiced_ratio < 0.2
    assert abs(active_rms_dbfs(out, sr) - active_rms_dbfs(audio, sr)) < 1.0


@pytest.mark.parametrize("renderer", dsp.RENDERERS)
def test_cheap_path_skips_world(speech: tuple[np.ndarray, int], monkeypatch: pytest.MonkeyPatch, renderer: str) -> None:
    def no_world(*_: object) -> None:
        raise AssertionError("WORLD analysis must not run for an EQ/gain-only transform")

    monkeypatch.setattr(world_render, "analyse_world", no_world)
    audio, sr = speech
    assert np.allclose(apply_transform(audio, sr, VoiceTransform.identity(), renderer=renderer), audio, atol=1e-4)
    out = apply_transform(audio, sr, VoiceTransform(gain_db=-6.0, tilt_db_per_octave=1.0), renderer=renderer)
    assert active_rms_dbfs(out, sr) == pytest.approx(active_rms_dbfs(audio, sr) - 6.0, abs=0.3)


def test_eq_boosts_the_bands_it_is_asked_to(speech: tuple[np.ndarray, int], apply: Apply) -> None:
    audio, sr = speech
    gains = tuple(6.0 if i >= LTAS_BANDS - 6 else 0.0 for i in range(LTAS_BANDS))
    before = np.array(analyse_voice(audio, sr).ltas_db)
    after = np.array(analyse_voice(apply(audio, sr, VoiceTransform(eq_gains_db=gains)), sr).ltas_db)
    high, low = slice(LTAS_BANDS - 5, LTAS_BANDS), slice(0, 8)
    assert (after[high] - before[high]).mean() - (after[low] - before[low]).mean() > 4.0


def test_loud_output_is_limited_not_clipped(speech: tuple[np.ndarray, int], apply: Apply) -> None:
    audio, sr = speech
    out = apply(audio, sr, VoiceTransform(gain_db=24.0))
    assert float(np.max(np.abs(out))) <= 0.97 + 1e-6
    assert active_rms_dbfs(out, sr) > active_rms_dbfs(audio, sr) + 10.0
    at_ceiling = np.abs(out) >= 0.9699
    runs = np.convolve(at_ceiling.astype(int), np.ones(4, int), "valid")
    assert int(runs.max()) < 4, "flat-topped (clipped) runs of 4+ samples at the ceiling"


def test_compose_adds_pitch_multiplies_ranges_and_ors_whisper() -> None:
    eq = tuple(float(i) for i in range(LTAS_BANDS))
    base = VoiceTransform(pitch_semitones=3.0, pitch_range=1.2, f0_target_hz=180.0, formant_factor=1.1, eq_gains_db=eq)
    style = VoiceTransform(pitch_semitones=-1.0, pitch_range=0.5, formant_factor=1.1, gain_db=2.0, whisper=True)
    both = base.composed_with(style)
    assert both.pitch_semitones == 2.0 and both.pitch_range == pytest.approx(0.6)
    assert both.formant_factor == pytest.approx(1.21) and both.f0_target_hz == 180.0
    assert both.eq_gains_db == eq and both.gain_db == 2.0 and both.whisper
    assert base.composed_with(VoiceTransform.identity()) == base


@pytest.mark.parametrize(
    "kwargs",
    [{"pitch_range": 0.0}, {"formant_factor": 3.0}, {"eq_gains_db": (1.0, 2.0)}, {"gain_db": float("nan")}],
)
def test_invalid_transforms_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        VoiceTransform(**kwargs)  # type: ignore[arg-type]


def test_empty_and_tiny_inputs_do_not_crash(apply: Apply) -> None:
    assert apply(np.zeros(0, np.float32), 22050, VoiceTransform(pitch_semitones=2.0)).size == 0
    tiny = apply(np.full(10, 0.1, np.float32), 22050, VoiceTransform(pitch_semitones=2.0, gain_db=3.0))
    assert tiny.shape == (10,) and np.isfinite(tiny).all()


@pytest.mark.parametrize("renderer", ["torch", "psola", "harmonic", "pulse"])
def test_a_batch_of_different_transforms_equals_each_row_alone(speech: tuple[np.ndarray, int], renderer: str) -> None:
    audio, sr = speech
    pieces = [audio, audio[: len(audio) // 2], audio[len(audio) // 3 :]]
    transforms = [
        VoiceTransform(f0_target_hz=180.0, gain_db=-3.0),
        VoiceTransform(pitch_semitones=-2.0),
        VoiceTransform(whisper=True),  # its noise is drawn per row (it was one draw per batch, seen on the H200)
    ]
    batched = dsp.apply_transforms(pieces, sr, transforms, renderer=renderer)
    for piece, transform, row in zip(pieces, transforms, batched, strict=True):
        alone = apply_transform(piece, sr, transform, renderer=renderer)
        assert len(row) == len(piece) and np.corrcoef(row, alone)[0, 1] > 0.999
