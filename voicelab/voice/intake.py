"""Voice-prompt intake: decode any libsndfile format, validate, and normalise to 16 kHz mono.

Every refusal is an ``InvalidPromptError`` whose message is the one sentence the user sees.
"""

from __future__ import annotations

import hashlib
import io
import logging
import math
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO

import numpy as np
import soundfile as sf
from scipy.signal import butter, sosfilt

from voicelab.errors import InvalidPromptError
from voicelab.lru import BoundedLRU
from voicelab.voice.analysis import FRAME_S, active_frames, active_rms_dbfs, frame_levels_db, pitch_track, resample
from voicelab.voice.prompt import MAX_PROMPT_S, PROMPT_RULE, SILENCE_PEAK, PromptAudio, check_prompt_audio

log = logging.getLogger(__name__)

PROCESS_RATE = 16000
TARGET_DBFS = -20.0  # RMS of the active frames after normalisation
PEAK_CEILING = 0.95
MIN_SOURCE_RATE = 8000
MAX_DECODE_S = 120.0  # never decode more than this from the start of a file
EDGE_PAD_S = 0.05  # silence kept before the first and after the last speech frame
MIN_VOICED_S = 0.25
MIN_VOICED_SHARE = 0.10
_BLOCK_VALUES = 1 << 20  # samples (frames x channels) decoded at a time


def load_prompt(
    source: str | Path | bytes,
    transcript: str = "",
    *,
    max_bytes: int = 50 * 2**20,
    max_speech_s: float = 30.0,
    min_speech_s: float = 1.0,
) -> PromptAudio:
    """Validate and normalise a voice prompt; raises ``InvalidPromptError`` with a user-readable sentence."""
    audio, rate = _decode(_open(source, max_bytes))
    if len(audio) == 0:
        raise InvalidPromptError("The voice prompt contains no audio; please record or upload someone speaking.")
    audio16 = _highpass(resample(audio, rate, PROCESS_RATE))
    levels = frame_levels_db(audio16, PROCESS_RATE)
    active = active_frames(levels)
    if len(audio16) == 0 or float(np.max(np.abs(audio16))) < SILENCE_PEAK or not active.any():
        raise InvalidPromptError("The voice prompt is silent; please record someone speaking.")
    hop = int(FRAME_S * PROCESS_RATE)
    speech_s = float(active.sum()) * FRAME_S
    if speech_s < min_speech_s:
        raise InvalidPromptError(
            f"The voice prompt has only {speech_s:.1f} s of speech; a voice prompt is {PROMPT_RULE}."
        )
    notices: list[str] = []
    last = int(np.flatnonzero(active)[-1])
    if speech_s > max_speech_s:
        last = int(np.searchsorted(np.cumsum(active), round(max_speech_s / FRAME_S)))
        notices.append(f"The voice prompt has {speech_s:.0f} s of speech; only the first {max_speech_s:g} s were used.")
    pad = int(EDGE_PAD_S * PROCESS_RATE)
    start = max(0, int(np.flatnonzero(active)[0]) * hop - pad)
    stop = min(len(audio16), (last + 1) * hop + pad)
    if stop - start > MAX_PROMPT_S * PROCESS_RATE:  # pauses made it longer than the rule allows
        stop = start + int(MAX_PROMPT_S * PROCESS_RATE)
        if not notices:
            notices.append("The voice prompt is longer than 30 s; only the first 30 s were used.")
    trimmed = audio16[start:stop]
    _require_voicing(trimmed, float(active[: last + 1].sum()) * FRAME_S)
    samples = _normalise_loudness(trimmed)
    digest = hashlib.sha256(samples.tobytes()).hexdigest()
    log.info("prompt accepted: %.2f s, sha256 %s", len(samples) / PROCESS_RATE, digest[:12])
    prompt = PromptAudio(samples, PROCESS_RATE, digest, transcript=transcript, notices=tuple(notices))
    check_prompt_audio(prompt)
    return prompt


class PromptIntake:
    """``load_prompt`` behind a small cache keyed by the clip's bytes: a voice cloned again and again (the same
    upload in the Clone tab, a saved voice through the API) is decoded, filtered, trimmed and checked once. On the
    2-core development CPU the intake took 10 ms for a 3 s clip and 43 ms for a 13 s one, reading and hashing the
    bytes 0.1-0.4 ms: time every clone request spent before it was queued. A refused clip is not kept (it is
    refused again, with the same sentence). Each caller gets its own copy of the samples: none can change another's."""

    def __init__(self, capacity: int = 8) -> None:
        self.cache: BoundedLRU[PromptAudio] = BoundedLRU(capacity)

    def load(self, source: str | Path | bytes, transcript: str = "", *, max_bytes: int = 50 * 2**20) -> PromptAudio:
        data = _read(source, max_bytes)
        key = hashlib.sha256(data).hexdigest()
        prompt = self.cache.get(key)
        if prompt is None:
            prompt = load_prompt(data, "", max_bytes=max_bytes)
            self.cache.put(key, prompt)
        return replace(prompt, samples=prompt.samples.copy(), transcript=transcript)  # a copy: 0.1 ms for 10 s


def _read(source: str | Path | bytes, max_bytes: int) -> bytes:
    """The clip's bytes, after the same checks (found, not empty, not too large) as ``load_prompt``'s."""
    opened = _open(source, max_bytes)
    return opened.read_bytes() if isinstance(opened, Path) else opened.read()


def _open(source: str | Path | bytes, max_bytes: int) -> BinaryIO | Path:
    """The file to decode, refused before decoding when it is too large."""
    limit = f"{max_bytes / 2**20:.3g} MB" if max_bytes >= 2**20 else f"{max_bytes / 2**10:.3g} kB"
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        if not data:
            raise InvalidPromptError("The voice prompt is empty; please upload an audio file.")
        if len(data) > max_bytes:
            raise InvalidPromptError(f"The voice prompt is larger than {limit}; please upload a shorter clip.")
        return io.BytesIO(data)
    path = Path(source)
    if not path.is_file():
        raise InvalidPromptError("The voice prompt file could not be found; please upload it again.")
    size = path.stat().st_size
    if size == 0:
        raise InvalidPromptError("The voice prompt is empty; please upload an audio file.")
    if size > max_bytes:
        raise InvalidPromptError(f"The voice prompt is larger than {limit}; please upload a shorter clip.")
    return path


def _decode(source: BinaryIO | Path) -> tuple[np.ndarray, int]:
    """Mono float32 samples (channels averaged, block by block) and the file's sample rate."""
    try:
        with sf.SoundFile(source) as f:
            rate, channels = int(f.samplerate), int(f.channels)
            if rate < MIN_SOURCE_RATE:
                raise InvalidPromptError(
                    f"The voice prompt's sample rate of {rate} Hz is too low for speech; "
                    f"please use at least {MIN_SOURCE_RATE // 1000} kHz."
                )
            limit = int(MAX_DECODE_S * rate)
            block = max(1, _BLOCK_VALUES // max(1, channels))
            parts: list[np.ndarray] = []
            total = 0
            while total < limit:
                data = f.read(min(block, limit - total), dtype="float64", always_2d=True)
                if len(data) == 0:
                    break
                parts.append(_downmix(data))
                total += len(data)
    except (sf.SoundFileError, RuntimeError, ValueError, EOFError) as err:
        log.info("prompt refused, not decodable: %s", err)
        raise InvalidPromptError(
            "The voice prompt is not an audio file that can be read; please upload WAV, FLAC, OGG or MP3."
        ) from err
    audio = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
    return audio, rate


def _downmix(block: np.ndarray) -> np.ndarray:
    """Average the channels; refuse NaN/infinite samples, bound huge float values."""
    if not np.isfinite(block).all():
        raise InvalidPromptError(
            "The voice prompt contains invalid samples (not-a-number or infinite values); please export it again."
        )
    return np.asarray(np.clip(block.mean(axis=1), -1e30, 1e30), dtype=np.float32)


def _highpass(audio: np.ndarray) -> np.ndarray:
    """Remove DC offset and rumble below ~50 Hz (after scaling huge float input to a sane range)."""
    peak = float(np.max(np.abs(audio))) if len(audio) else 0.0
    if peak > 1.0:
        audio = audio / peak
    sos = butter(2, 50.0, btype="highpass", fs=PROCESS_RATE, output="sos")
    return np.asarray(sosfilt(sos, audio.astype(np.float64)), dtype=np.float32)


def _require_voicing(audio: np.ndarray, speech_s: float) -> None:
    """Refuse noise: speech must have voiced (periodic) frames by Praat's autocorrelation voicing decision."""
    f0 = pitch_track(audio, PROCESS_RATE)
    voiced_s = float((f0 > 0).sum()) * FRAME_S
    if voiced_s < MIN_VOICED_S or voiced_s < MIN_VOICED_SHARE * speech_s:
        log.info("prompt refused: %.2f s voiced of %.2f s active", voiced_s, speech_s)
        raise InvalidPromptError(
            "The voice prompt contains no voiced speech, only noise; please record someone speaking."
        )


def _normalise_loudness(audio: np.ndarray) -> np.ndarray:
    """Active-speech RMS to ``TARGET_DBFS``, lowered further if the peak would pass ``PEAK_CEILING``."""
    level = active_rms_dbfs(audio, PROCESS_RATE)
    gain = 10 ** ((TARGET_DBFS - level) / 20) if math.isfinite(level) else 1.0
    peak = float(np.max(np.abs(audio))) * gain
    if peak > PEAK_CEILING:
        gain *= PEAK_CEILING / peak
    return np.ascontiguousarray(audio * np.float32(gain), dtype=np.float32)
