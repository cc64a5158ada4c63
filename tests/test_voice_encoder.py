"""GE2E speaker encoder: librosa-equal mel filters, strict weight loading, same speaker scores higher, batches at
recurring shapes that embed each piece as alone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from voicelab.errors import BackendLoadError
from voicelab.voice.analysis import frame_levels_db, resample
from voicelab.voice.encoder import (
    HOP,
    PARTIAL_STEP,
    SAMPLE_RATE,
    SpeakerEncoder,
    mel_filterbank,
    normalize_volume,
    partial_slices,
    trim_long_silences,
    weights_path,
)

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def encoder() -> Iterator[SpeakerEncoder]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 3-layer LSTM on a shared 2-core CPU is ~10x slower with more threads
    yield SpeakerEncoder("cpu")
    torch.set_num_threads(threads)


def _speech(name: str) -> np.ndarray:
    audio, sr = sf.read(DATA / f"{name}.wav", dtype="float32")
    return resample(audio, sr, 16000)


@pytest.mark.parametrize("n_mels", [80, 128])
def test_mel_filterbank_equals_librosa_slaney(n_mels: int) -> None:
    reference = np.load(DATA / "whisper_mel_filters.npz")[f"mel_{n_mels}"]  # librosa.filters.mel(16000, 400, n)
    ours = mel_filterbank(16000, 400, n_mels)
    np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("length", [1, 479, 480, 48_017])
def test_voice_detection_levels_are_each_centred_windows_rms(length: int) -> None:
    """The 30 ms windows tile the signal, so their levels are block sums (faster than the overlapping frames' running
    sums); each is still the RMS of the window centred on its frame, zeros outside the signal."""
    audio = np.random.default_rng(length).standard_normal(length).astype(np.float32) * 0.1
    levels = frame_levels_db(audio, 16000, hop_s=0.03, win_s=0.03)
    win, padded = 480, np.concatenate([np.zeros(240), audio.astype(np.float64), np.zeros(480)])
    expected = [np.mean(padded[k * win : (k + 1) * win] ** 2) for k in range(-(-length // win))]
    np.testing.assert_allclose(levels, 10 * np.log10(np.maximum(expected, 1e-12)), rtol=0, atol=1e-4)


def test_partials_are_160_frames_with_about_half_overlap() -> None:
    slices = partial_slices(16000 * 5)
    assert all(s.stop - s.start == 160 for s in slices)
    assert slices[1].start - slices[0].start == 77
    assert partial_slices(100) == [slice(0, 160)]


def test_embedding_is_unit_norm_256(encoder: SpeakerEncoder) -> None:
    embedding = encoder.embed(_speech("arctic_awb_en_male"))
    assert embedding.shape == (256,) and embedding.device == torch.device("cpu")
    assert abs(float(torch.linalg.vector_norm(embedding)) - 1.0) < 1e-5


def test_same_speaker_scores_higher_than_different_speakers(encoder: SpeakerEncoder) -> None:
    libri = _speech("librivox_en_male")
    half = len(libri) // 2
    first, second = encoder.embed(libri[:half]), encoder.embed(libri[half:])
    awb = _speech("arctic_awb_en_male")
    awb_a, awb_b = encoder.embed(awb[: len(awb) // 2]), encoder.embed(awb[len(awb) // 2 :])
    slt = encoder.embed(_speech("arctic_slt_en_female"))
    same_libri = encoder.similarity(first, second)
    same_awb = encoder.similarity(awb_a, awb_b)
    different = [encoder.similarity(x, y) for x in (first, second) for y in (awb_a, awb_b, slt)]
    different += [encoder.similarity(x, slt) for x in (awb_a, awb_b)]
    assert same_libri > max(different) + 0.1
    assert same_awb > max(different)


def test_weights_with_a_missing_tensor_are_refused(tmp_path: Path) -> None:
    checkpoint = torch.load(weights_path(), map_location="cpu", weights_only=True)
    del checkpoint["model_state"]["lstm.weight_hh_l2"]
    broken = tmp_path / "broken.pt"
    torch.save({"model_state": checkpoint["model_state"]}, broken)
    with pytest.raises(BackendLoadError, match=r"missing \['lstm.weight_hh_l2'\]"):
        SpeakerEncoder("cpu", path=broken)


def _alone_unpadded(encoder: SpeakerEncoder, samples: np.ndarray) -> torch.Tensor:
    """Resemblyzer's recipe for one piece at its own sizes: its own centred STFT, its partials as the batch."""
    wav = trim_long_silences(normalize_volume(samples))
    slices = partial_slices(len(wav))
    wav = np.pad(wav, (0, max(0, slices[-1].stop * HOP - len(wav))))
    with torch.inference_mode():
        mel = encoder.mel(torch.from_numpy(wav))
        mean = encoder.model(torch.stack([mel[s] for s in slices])).mean(dim=0)
    return mean / torch.linalg.vector_norm(mean)


def test_pieces_of_different_lengths_run_at_recurring_shapes_and_embed_as_alone(
    encoder: SpeakerEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(encoder, "rounds_shapes", True)  # what a GPU encoder does (a CPU one skips the padding)
    awb = _speech("arctic_awb_en_male")
    pieces = [awb[: int(2.9 * 16000)], awb[: int(3.2 * 16000)], _speech("librivox_en_male")]
    shapes: list[tuple[int, ...]] = []
    hook = encoder.model.lstm.register_forward_pre_hook(lambda _, args: shapes.append(tuple(args[0].shape)))
    try:
        alone = [encoder.embed(piece) for piece in pieces[:2]]
        together = encoder.embed_batch(pieces)
    finally:
        hook.remove()
    assert shapes[0] == shapes[1], "two lengths a few partials apart gave the LSTM different batch shapes"
    assert all(rows % PARTIAL_STEP == 0 for rows, _, _ in shapes)
    for piece, one, batched in zip(pieces, [*alone, None], together, strict=True):
        reference = _alone_unpadded(encoder, piece)
        assert float(torch.dot(batched, reference)) > 0.99999
        if one is not None:
            assert float(torch.dot(one, reference)) > 0.99999


def test_warming_runs_every_spectrogram_and_lstm_batch_a_scored_reply_can_make(
    encoder: SpeakerEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert encoder.warm_shapes(4 * SAMPLE_RATE, pieces=2) == []  # a CPU encoder rounds nothing, so warms nothing
    monkeypatch.setattr(encoder, "rounds_shapes", True)  # what a GPU encoder does
    seen: list[tuple[int, ...]] = []
    stft = torch.stft

    def recorded_stft(x: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        seen.append(tuple(x.shape))
        return stft(x, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(torch, "stft", recorded_stft)
    hook = encoder.model.lstm.register_forward_pre_hook(lambda _, args: seen.append(tuple(args[0].shape)))
    try:
        warmed = set(encoder.warm_shapes(20 * SAMPLE_RATE, pieces=2))
        warmed_shapes = set(seen)
        assert len(warmed) == len(warmed_shapes) < 25  # each shape once; a few dozen cover 20 s of speech
        awb, libri = _speech("arctic_awb_en_male"), _speech("librivox_en_male")
        speech = np.concatenate([awb, libri, awb, libri])
        for seconds in (1.1, 4.0, 9.3, 17.5):
            seen.clear()
            piece = speech[: int(seconds * SAMPLE_RATE)]
            encoder.embed_batch([piece, piece[: len(piece) * 9 // 10]])
            assert seen and set(seen) <= warmed_shapes, f"{seconds} s met a shape the warming did not run"
    finally:
        hook.remove()
