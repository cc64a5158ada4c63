"""Prompt intake: what a user uploading a voice clip sees, for good files and every kind of bad one."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from voicelab.errors import InvalidPromptError
from voicelab.voice.analysis import active_rms_dbfs
from voicelab.voice.intake import load_prompt

DATA = Path(__file__).parent / "data"


def _clip() -> tuple[np.ndarray, int]:
    audio, sr = sf.read(DATA / "arctic_slt_en_female.wav", dtype="float32")
    return audio, sr


def _encode(audio: np.ndarray, sr: int, fmt: str = "WAV", subtype: str | None = None) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, audio, sr, format=fmt, subtype=subtype)
    return buffer.getvalue()


def test_a_real_clip_becomes_16k_mono_trimmed_and_normalised() -> None:
    audio, sr = _clip()
    padded = np.concatenate([np.zeros(sr, np.float32), audio * 0.1, np.zeros(sr, np.float32)])
    prompt = load_prompt(_encode(padded, sr), "He turned sharply.")
    assert prompt.sample_rate == 16000
    assert prompt.samples.dtype == np.float32 and prompt.samples.ndim == 1
    assert prompt.duration_s < len(audio) / sr + 0.3  # the added second of silence on each side is gone
    assert abs(active_rms_dbfs(prompt.samples, 16000) - (-20.0)) < 1.0
    assert prompt.sha256 == hashlib.sha256(prompt.samples.tobytes()).hexdigest()
    assert prompt.transcript == "He turned sharply." and prompt.notices == ()


@pytest.mark.parametrize(("fmt", "subtype"), [("FLAC", None), ("OGG", "VORBIS"), ("MP3", "MPEG_LAYER_III")])
def test_compressed_formats_are_accepted(fmt: str, subtype: str) -> None:
    audio, sr = _clip()
    prompt = load_prompt(_encode(audio, sr, fmt, subtype))
    assert 2.0 < prompt.duration_s < 3.5


def test_same_audio_gives_same_hash_from_path_and_bytes(tmp_path: Path) -> None:
    path = DATA / "arctic_awb_en_male.wav"
    assert load_prompt(path).sha256 == load_prompt(path.read_bytes()).sha256 == load_prompt(str(path)).sha256


def test_high_rate_many_channels_is_downmixed() -> None:
    audio, sr = _clip()
    up = np.repeat(audio, 12)  # 16 kHz -> 192 kHz by sample repetition
    prompt = load_prompt(_encode(np.tile(up[:, None] * 0.5, (1, 8)), sr * 12))
    assert prompt.sample_rate == 16000 and 2.0 < prompt.duration_s < 3.5


def test_file_over_the_size_limit_is_refused_before_decoding(tmp_path: Path) -> None:
    not_audio = b"\x00garbage" * 1000  # refused for its size, not for being undecodable
    with pytest.raises(
        InvalidPromptError, match=r"^The voice prompt is larger than 5 kB; please upload a shorter clip.$"
    ):
        load_prompt(not_audio, max_bytes=5 * 2**10)
    path = tmp_path / "big.wav"
    path.write_bytes(not_audio)
    with pytest.raises(InvalidPromptError, match="larger than"):
        load_prompt(path, max_bytes=5 * 2**10)


def test_default_limit_is_50_mb(tmp_path: Path) -> None:
    path = tmp_path / "huge.wav"
    with path.open("wb") as f:
        f.truncate(50 * 2**20 + 1)
    with pytest.raises(InvalidPromptError, match=r"larger than 50 MB"):
        load_prompt(path)


def test_corrupt_file_is_refused() -> None:
    with pytest.raises(InvalidPromptError, match=r"not an audio file that can be read; please upload WAV, FLAC"):
        load_prompt(b"RIFF\x00\x00\x00\x00WAVEfmt this is no audio at all" * 10)


def test_truncated_wav_header_is_refused() -> None:
    audio, sr = _clip()
    with pytest.raises(InvalidPromptError, match="not an audio file"):
        load_prompt(_encode(audio, sr)[:30])


def test_empty_and_missing_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidPromptError, match="The voice prompt is empty"):
        load_prompt(b"")
    with pytest.raises(InvalidPromptError, match="could not be found"):
        load_prompt(tmp_path / "nothing.wav")


def test_nan_samples_are_refused() -> None:
    audio, sr = _clip()
    audio = audio.copy()
    audio[1000] = np.nan
    with pytest.raises(InvalidPromptError, match=r"invalid samples \(not-a-number or infinite values\)"):
        load_prompt(_encode(audio, sr, subtype="FLOAT"))


def test_silence_is_refused() -> None:
    with pytest.raises(InvalidPromptError, match=r"^The voice prompt is silent; please record someone speaking\.$"):
        load_prompt(_encode(np.zeros(32000, np.float32), 16000))


def test_noise_without_voicing_is_refused() -> None:
    noise = 0.1 * np.random.default_rng(0).standard_normal(48000).astype(np.float32)
    with pytest.raises(InvalidPromptError, match="no voiced speech, only noise"):
        load_prompt(_encode(noise, 16000))


def test_less_than_a_second_of_speech_is_refused() -> None:
    audio, sr = _clip()
    with pytest.raises(
        InvalidPromptError, match=r"has only 0\.\d s of speech; a voice prompt is 1 to 30 s of one person speaking"
    ):
        load_prompt(_encode(audio[int(0.45 * sr) : int(1.0 * sr)], sr))


def test_one_sample_file_is_refused_cleanly() -> None:
    with pytest.raises(InvalidPromptError, match="of speech; a voice prompt is 1 to 30 s"):
        load_prompt(_encode(np.array([0.5], np.float32), 16000))


def test_too_low_sample_rate_is_refused() -> None:
    audio, _ = _clip()
    with pytest.raises(InvalidPromptError, match="sample rate of 2000 Hz is too low"):
        load_prompt(_encode(audio[:4000], 2000))


def test_long_prompt_keeps_first_30_s_of_speech_with_a_notice() -> None:
    audio, sr = _clip()
    prompt = load_prompt(_encode(np.tile(audio, 14), sr))
    assert len(prompt.notices) == 1
    assert prompt.notices[0].endswith("only the first 30 s were used.")
    assert 30.0 <= prompt.duration_s < 36.0


def test_a_prompt_long_with_pauses_is_cut_to_the_same_30_s_rule() -> None:
    """25 s of speech spread over 40 s: the rule is 30 s of audio, said once, with one notice."""
    sr = 16000
    t = np.arange(sr) / sr
    voiced = (0.3 * np.sum([np.sin(2 * np.pi * 150 * k * t) / k for k in range(1, 10)], axis=0)).astype(np.float32)
    pause = np.zeros(int(0.6 * sr), np.float32)
    clip = np.concatenate([np.concatenate([voiced, pause]) for _ in range(25)])
    buffer = io.BytesIO()
    sf.write(buffer, clip, sr, format="WAV")
    prompt = load_prompt(buffer.getvalue())
    assert prompt.duration_s <= 30.0 + 1e-6
    assert prompt.notices == ("The voice prompt is longer than 30 s; only the first 30 s were used.",)


def test_the_intake_cache_decodes_a_clip_once_whatever_its_path_or_transcript(tmp_path: Path) -> None:
    """``PromptIntake`` (the service's and the saved voices'): the same bytes again, by another path or as bytes,
    with another transcript, give the first intake's samples (each caller its own copy) with the caller's transcript;
    other bytes are a new entry; past the capacity the oldest is evicted."""
    from voicelab.voice.intake import PromptIntake

    intake = PromptIntake(capacity=2)
    path = DATA / "arctic_awb_en_male.wav"
    copy = tmp_path / "copy.wav"
    copy.write_bytes(path.read_bytes())
    first = intake.load(path, "one")
    again = intake.load(copy, "two")
    assert again.samples is not first.samples and again.sha256 == first.sha256 == load_prompt(path).sha256
    assert (first.transcript, again.transcript, intake.load(path.read_bytes()).transcript) == ("one", "two", "")
    assert intake.cache.hits == 2 and intake.cache.misses == 1
    first.samples[:] = 0.0  # a caller's own copy: the cache and the others keep the clip
    np.testing.assert_array_equal(again.samples, load_prompt(path).samples)
    np.testing.assert_array_equal(intake.load(path).samples, again.samples)
    intake.load(DATA / "arctic_slt_en_female.wav")
    intake.load(DATA / "librivox_en_male.wav")
    assert intake.cache.evictions == 1 and len(intake.cache) == 2


def test_the_intake_cache_refuses_a_bad_clip_every_time_and_keeps_the_size_limit(tmp_path: Path) -> None:
    from voicelab.voice.intake import PromptIntake

    intake = PromptIntake()
    silent = _encode(np.zeros(32000, np.float32), 16000)
    for _ in range(2):
        with pytest.raises(InvalidPromptError, match=r"^The voice prompt is silent; please record someone speaking\.$"):
            intake.load(silent)
    assert len(intake.cache) == 0
    with pytest.raises(InvalidPromptError, match="larger than"):
        intake.load(DATA / "arctic_awb_en_male.wav", max_bytes=1024)
    with pytest.raises(InvalidPromptError, match="could not be found"):
        intake.load(tmp_path / "nothing.wav")
