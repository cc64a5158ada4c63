"""Audio as the HTTP API sends it: response formats through libsndfile (soundfile), streamed where they can be.

Which formats stream chunk by chunk (measured with soundfile 0.14 / libsndfile 1.2.2):

- ``pcm``: raw 16-bit little-endian mono at the voice's sample rate (``X-Sample-Rate`` says which);
- ``wav``: 16-bit PCM; while streaming, the header's RIFF and data sizes say "unknown length" (0xFFFFFFFF, as
  OpenAI's streamed WAV does) because they cannot be known before the last sentence; libsndfile, ffmpeg and
  Python's ``wave`` read such a file to its end;
- ``opus``: Ogg Opus, resampled to 48 kHz (libsndfile's Opus takes only 8/12/16/24/48 kHz); its pages stream.
- ``mp3`` and ``flac`` are written whole once the last sentence is ready: libsndfile rewrites their header
  (the LAME/Xing frame count, FLAC's STREAMINFO) when the file closes, and a stream without that rewrite
  decodes short (mp3) or not at all with libsndfile (flac).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import soundfile as sf

from voicelab.voice.analysis import resample

OPUS_RATE = 48000
UNKNOWN_SIZE = (0xFFFFFFFF).to_bytes(4, "little")


@dataclass(frozen=True)
class AudioFormat:
    """A response format: libsndfile's container and subtype, the HTTP media type, and whether it streams."""

    container: str
    subtype: str
    media_type: str
    streams: bool


FORMATS: dict[str, AudioFormat] = {
    "wav": AudioFormat("WAV", "PCM_16", "audio/wav", True),
    "pcm": AudioFormat("RAW", "PCM_16", "audio/pcm", True),
    "opus": AudioFormat("OGG", "OPUS", "audio/ogg", True),
    "flac": AudioFormat("FLAC", "PCM_16", "audio/flac", False),
    "mp3": AudioFormat("MP3", "MPEG_LAYER_III", "audio/mpeg", False),
}


def output_rate(fmt: str, sample_rate: int) -> int:
    return OPUS_RATE if fmt == "opus" else sample_rate


def _prepared(samples: np.ndarray, fmt: str, sample_rate: int) -> np.ndarray:
    audio = np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0)
    rate = output_rate(fmt, sample_rate)
    return resample(audio, sample_rate, rate).astype(np.float32) if rate != sample_rate else audio


def encode(samples: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    """The whole utterance as one file of ``fmt``."""
    spec = FORMATS[fmt]
    buffer = io.BytesIO()
    sf.write(
        buffer,
        _prepared(samples, fmt, sample_rate),
        output_rate(fmt, sample_rate),
        format=spec.container,
        subtype=spec.subtype,
        endian="LITTLE" if fmt == "pcm" else "FILE",
    )
    return buffer.getvalue()


class _Sink(io.RawIOBase):
    """A seekable in-memory file for libsndfile that hands out the bytes appended since the last ``take``."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()
        self.position = 0
        self.sent = 0

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        chunk = bytes(b)
        self.data[self.position : self.position + len(chunk)] = chunk
        self.position += len(chunk)
        return len(chunk)

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        count = min(len(b), len(self.data) - self.position)
        b[:count] = self.data[self.position : self.position + count]
        self.position += count
        return count

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: len(self.data)}[whence]
        self.position = base + offset
        return self.position

    def tell(self) -> int:
        return self.position

    def take(self) -> bytes:
        out = bytes(self.data[self.sent :])
        self.sent = len(self.data)
        return out


class StreamEncoder:
    """One response body in ``fmt``, fed chunk by chunk: ``feed`` returns the bytes ready to send now."""

    def __init__(self, fmt: str, sample_rate: int) -> None:
        self.fmt, self.sample_rate = fmt, sample_rate
        self.spec = FORMATS[fmt]
        self._held: list[np.ndarray] = []
        self._sink = _Sink()
        self._file: sf.SoundFile | None = None
        self._header_sent = False

    def feed(self, samples: np.ndarray) -> bytes:
        audio = _prepared(samples, self.fmt, self.sample_rate)
        if not self.spec.streams:
            self._held.append(audio)
            return b""
        if self._file is None:
            self._file = sf.SoundFile(
                self._sink,
                "w",
                output_rate(self.fmt, self.sample_rate),
                1,
                subtype=self.spec.subtype,
                endian="LITTLE" if self.fmt == "pcm" else "FILE",
                format=self.spec.container,
            )
        self._file.write(audio)
        return self._unknown_length(self._sink.take())

    def close(self) -> bytes:
        """The rest of the body (all of it for a format written whole)."""
        if not self.spec.streams:
            held = np.concatenate(self._held) if self._held else np.zeros(0, np.float32)
            return encode(held, output_rate(self.fmt, self.sample_rate), self.fmt)
        if self._file is None:
            return encode(np.zeros(0, np.float32), self.sample_rate, self.fmt)
        self._file.close()
        return self._sink.take()  # the header rewrite at offset 0 was already sent (see the module's note)

    def _unknown_length(self, data: bytes) -> bytes:
        if self.fmt != "wav" or self._header_sent:
            return data
        self._header_sent = True
        header = bytearray(data)
        data_at = header.find(b"data")
        header[4:8] = UNKNOWN_SIZE
        header[data_at + 4 : data_at + 8] = UNKNOWN_SIZE
        return bytes(header)
