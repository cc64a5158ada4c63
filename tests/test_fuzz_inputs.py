"""Bad input, generated: every case gets valid audio or one clear sentence, and the engine stays healthy.

The cases are built from one seed, so a failure names a case that reproduces. Voice-prompt cases go through
``load_prompt`` (that is where uploads are validated); text and control cases go through one real
``EngineClient`` with the real Piper voice, so the spawned worker sees them; a handful of prompts also go
through that engine. At the end a normal request must still work on the same worker process.
"""

from __future__ import annotations

import io
import math
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from voicelab.engine.client import EngineClient
from voicelab.engine.messages import SynthesisRequest, SynthesisResult
from voicelab.errors import VoiceLabError
from voicelab.settings import Settings
from voicelab.voice.analysis import resample
from voicelab.voice.intake import load_prompt
from voicelab.voice.prompt import PromptAudio

SEED = 20261130
DATA = Path(__file__).parent / "data"
SPEECH = DATA / "arctic_awb_en_male.wav"
SPEECH_TEXT = "And you always want to see it in the superlative degree."
LIMIT = 50 * 2**20
REQUEST_TIMEOUT_S = 180.0

Source = str | Path | bytes
OK, ERROR, EITHER = "ok", "error", "either"


# ---------------------------------------------------------------- what every outcome must look like


def assert_clear_sentence(exc: BaseException) -> None:
    """A user-facing refusal: a VoiceLabError with one short sentence, nothing from a stack trace."""
    assert isinstance(exc, VoiceLabError), f"{type(exc).__name__} is not a VoiceLabError: {exc}"
    text = str(exc)
    assert text and len(text) < 200, f"message is {len(text)} characters: {text!r}"
    assert text.endswith("."), f"message does not end with a period: {text!r}"
    for marker in ("Traceback", 'File "', "Errno", "\n", "Exception", "0x"):
        assert marker not in text, f"message contains {marker!r}: {text!r}"


def assert_valid_audio(audio: np.ndarray, rate: int, min_s: float, max_s: float) -> None:
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert len(audio) > 0 and np.isfinite(audio).all()
    assert float(np.max(np.abs(audio))) <= 1.0
    assert float(np.max(np.abs(audio))) > 1e-3, "audio is silent"
    assert min_s <= len(audio) / rate <= max_s, f"duration {len(audio) / rate:.2f} s not in [{min_s}, {max_s}]"


def expect(outcome: str, run: Callable[[], Any], match: str = "") -> Any:
    """Run one case; a refusal must be a clear sentence (containing ``match``), a success is returned."""
    try:
        value = run()
    except VoiceLabError as exc:
        assert_clear_sentence(exc)
        assert outcome != OK, f"refused a case that should work: {exc}"
        assert match.lower() in str(exc).lower(), f"expected {match!r} in {exc}"
        return None
    assert outcome != ERROR, "accepted a case that must be refused"
    return value


# ---------------------------------------------------------------- voice-prompt cases


@dataclass(frozen=True)
class Kit:
    """What a prompt case is built from: the real speech clip, a seeded generator, a scratch folder."""

    speech: np.ndarray  # float32, 16 kHz mono
    rng: np.random.Generator
    folder: Path

    def speech_at(self, rate: int) -> np.ndarray:
        return resample(self.speech, 16000, rate)

    def file(self, name: str, data: bytes) -> Path:
        path = self.folder / name
        path.write_bytes(data)
        return path


def encode(audio: np.ndarray, rate: int, fmt: str = "WAV", subtype: str | None = None) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, audio, rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


def wav_header(rate: int, channels: int, bits: int, data_bytes: int, fmt_code: int = 1) -> bytes:
    """A canonical 44-byte RIFF/WAVE header (fields can be made wrong on purpose)."""
    align = channels * bits // 8
    return (
        b"RIFF"
        + struct.pack("<I", (36 + data_bytes) & 0xFFFFFFFF)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, fmt_code, channels, rate, rate * align, align, bits)
        + b"data"
        + struct.pack("<I", data_bytes & 0xFFFFFFFF)
    )


def sparse_wav(kit: Kit, name: str, size: int) -> Path:
    """A file of ``size`` bytes that costs nothing on disk: a WAV header, then a hole."""
    path = kit.folder / name
    with path.open("wb") as handle:
        handle.write(wav_header(16000, 1, 16, size - 44))
        handle.truncate(size)
    return path


def sized_wav(kit: Kit, size: int) -> bytes:
    """A real 48 kHz stereo speech WAV of exactly ``size`` bytes (the speech repeats)."""
    frames = (size - 44) // 4
    loop = (np.clip(kit.speech_at(48000), -1, 1) * 32767).astype("<i2")
    mono = np.resize(loop, frames)
    data = np.repeat(mono, 2).tobytes() + b"\0" * ((size - 44) - frames * 4)
    return wav_header(48000, 2, 16, len(data)) + data


@dataclass(frozen=True)
class PromptCase:
    name: str
    build: Callable[[Kit], Source]
    outcome: str
    match: str = ""
    transcript: str = ""


def _speech_wav(kit: Kit) -> bytes:
    return encode(kit.speech, 16000, subtype="PCM_16")


def _random_byte_cases() -> list[PromptCase]:
    magics = [b"", b"RIFF\x24\x00\x00\x00WAVEfmt ", b"fLaC", b"OggS\x00\x02", b"ID3\x04\x00", b"\xff\xfb\x90\x64"]
    cases = []
    for i in range(30):
        magic = magics[i % len(magics)]

        def build(kit: Kit, magic: bytes = magic, i: int = i) -> bytes:
            size = int(kit.rng.integers(1, 2 ** (4 + i % 13)))
            return magic + kit.rng.bytes(size)

        cases.append(PromptCase(f"random-bytes-{i:02d}", build, ERROR))
    return cases


def _truncated_cases() -> list[PromptCase]:
    cuts = [1, 2, 4, 8, 11, 12, 16, 20, 24, 28, 32, 36, 40, 43, 44, 45, 47, 100, 1001, 16044, 64000, -1]
    outcome = {c: ERROR for c in cuts if 0 < c <= 16044}  # under 1 s of speech is refused

    def cut_at(cut: int) -> Callable[[Kit], bytes]:
        return lambda kit: _speech_wav(kit)[:cut]

    return [PromptCase(f"truncated-wav-{cut}", cut_at(cut), outcome.get(cut, OK), "voice prompt") for cut in cuts]


def _header_cases() -> list[PromptCase]:
    body = (np.zeros(16000, dtype="<i2")).tobytes()

    def speech_with(header: Callable[[int], bytes]) -> Callable[[Kit], bytes]:
        def build(kit: Kit) -> bytes:
            data = (np.clip(kit.speech, -1, 1) * 32767).astype("<i2").tobytes()
            return header(len(data)) + data

        return build

    return [
        PromptCase("header-rate-0", lambda kit: wav_header(0, 1, 16, len(body)) + body, ERROR),
        PromptCase("header-rate-4000", speech_with(lambda n: wav_header(4000, 1, 16, n)), ERROR, "too low"),
        PromptCase("header-channels-0", lambda kit: wav_header(16000, 0, 16, len(body)) + body, ERROR),
        PromptCase("header-bits-7", lambda kit: wav_header(16000, 1, 7, len(body)) + body, ERROR),
        PromptCase("header-format-code-99", lambda kit: wav_header(16000, 1, 16, len(body), 99) + body, ERROR),
        PromptCase("header-data-size-huge", speech_with(lambda n: wav_header(16000, 1, 16, 0xFFFFFFF0)), OK),
        PromptCase("header-data-size-zero", speech_with(lambda n: wav_header(16000, 1, 16, 0)), EITHER),
        PromptCase("header-ten-hours-claimed", speech_with(lambda n: wav_header(16000, 1, 16, 16000 * 2 * 36000)), OK),
    ]


def _empty_and_tiny_cases() -> list[PromptCase]:
    return [
        PromptCase("empty-bytes", lambda kit: b"", ERROR, "empty"),
        PromptCase("empty-file-wav", lambda kit: kit.file("empty.wav", b""), ERROR, "empty"),
        PromptCase("empty-file-mp3", lambda kit: kit.file("empty.mp3", b""), ERROR, "empty"),
        PromptCase("missing-file", lambda kit: kit.folder / "never-written.wav", ERROR, "could not be found"),
        PromptCase("directory-not-file", lambda kit: kit.folder, ERROR, "could not be found"),
        PromptCase("header-only-wav", lambda kit: encode(np.zeros(0, np.float32), 16000), ERROR),
        PromptCase("one-sample-16k", lambda kit: encode(np.array([0.5], np.float32), 16000), ERROR),
        PromptCase("one-sample-44k1", lambda kit: encode(np.array([-0.5], np.float32), 44100), ERROR),
        PromptCase("one-sample-flac", lambda kit: encode(np.array([0.25], np.float32), 16000, "FLAC"), ERROR),
        PromptCase("one-frame-8ch", lambda kit: encode(np.full((1, 8), 0.3, np.float32), 48000), ERROR),
        PromptCase("ten-ms-speech", lambda kit: encode(kit.speech[8000:8160], 16000), ERROR),
        PromptCase(
            "half-second-speech",
            lambda kit: encode(kit.speech[8000:16000], 16000),
            ERROR,
            "1 to 30 s of one person speaking",
        ),
    ]


def _non_finite_cases() -> list[PromptCase]:
    def poisoned(value: float, where: slice | None, subtype: str = "FLOAT") -> Callable[[Kit], bytes]:
        def build(kit: Kit) -> bytes:
            audio = kit.speech.astype(np.float64 if subtype == "DOUBLE" else np.float32).copy()
            audio[where if where is not None else slice(None)] = value
            return encode(audio, 16000, subtype=subtype)

        return build

    nan, inf = math.nan, math.inf
    return [
        PromptCase("all-nan", poisoned(nan, None), ERROR, "invalid samples"),
        PromptCase("one-nan-mid-speech", poisoned(nan, slice(32000, 32001)), ERROR, "invalid samples"),
        PromptCase("nan-burst", poisoned(nan, slice(20000, 21000)), ERROR, "invalid samples"),
        PromptCase("plus-inf", poisoned(inf, slice(100, 101)), ERROR, "invalid samples"),
        PromptCase("minus-inf", poisoned(-inf, slice(40000, 40010)), ERROR, "invalid samples"),
        PromptCase("nan-in-double", poisoned(nan, slice(5, 6), "DOUBLE"), ERROR, "invalid samples"),
        PromptCase("huge-finite-floats", lambda kit: encode(kit.speech * np.float32(1e30), 16000, subtype="FLOAT"), OK),
        PromptCase(
            "denormal-floats", lambda kit: encode(kit.speech * np.float32(1e-41), 16000, subtype="FLOAT"), ERROR
        ),
        PromptCase(
            "float-over-full-scale", lambda kit: encode(kit.speech * np.float32(40), 16000, subtype="FLOAT"), OK
        ),
    ]


def _layout_cases() -> list[PromptCase]:
    def channels(rate: int, count: int, keep: int | None = None) -> Callable[[Kit], bytes]:
        def build(kit: Kit) -> bytes:
            audio = np.tile(kit.speech_at(rate)[:, None], (1, count))
            if keep is not None:
                audio[:, [c for c in range(count) if c != keep]] = 0.0
            return encode(audio, rate, subtype="PCM_16")

        return build

    def pcm(subtype: str, fmt: str = "WAV", rate: int = 16000) -> Callable[[Kit], bytes]:
        return lambda kit: encode(kit.speech_at(rate), rate, fmt, subtype)

    return [
        PromptCase("192k-8ch", channels(192000, 8), OK),
        PromptCase("192k-mono", channels(192000, 1), OK),
        PromptCase("96k-6ch", channels(96000, 6), OK),
        PromptCase("16k-8ch-speech-in-one", channels(16000, 8, keep=5), OK),
        PromptCase("stereo-opposite-phase", lambda kit: encode(np.stack([kit.speech, -kit.speech], 1), 16000), ERROR),
        PromptCase("8k-mono", channels(8000, 1), OK),
        PromptCase("pcm-u8", pcm("PCM_U8"), OK),
        PromptCase("pcm-24", pcm("PCM_24"), OK),
        PromptCase("pcm-32", pcm("PCM_32"), OK),
        PromptCase("ulaw", pcm("ULAW"), OK),
        PromptCase("alaw", pcm("ALAW"), OK),
        PromptCase("ima-adpcm", pcm("IMA_ADPCM"), OK),
        PromptCase("ms-adpcm", pcm("MS_ADPCM"), OK),
        PromptCase("gsm610", pcm("GSM610", rate=8000), OK),
        PromptCase("w64", pcm("PCM_16", "W64"), OK),
        PromptCase("rf64", pcm("PCM_16", "RF64"), OK),
        PromptCase("aiff", pcm("PCM_16", "AIFF"), OK),
        PromptCase("au", pcm("PCM_16", "AU"), OK),
        PromptCase("caf", pcm("PCM_16", "CAF"), OK),
    ]


def _compressed_cases() -> list[PromptCase]:
    def coded(fmt: str, subtype: str | None, rate: int, stereo: bool = False) -> Callable[[Kit], bytes]:
        def build(kit: Kit) -> bytes:
            audio = kit.speech_at(rate)
            return encode(np.stack([audio, audio], 1) if stereo else audio, rate, fmt, subtype)

        return build

    def damaged(build: Callable[[Kit], bytes], keep: float, noise: bool = False) -> Callable[[Kit], bytes]:
        def run(kit: Kit) -> bytes:
            data = build(kit)
            head = data[: int(len(data) * keep)]
            return head + kit.rng.bytes(len(data) - len(head)) if noise else head

        return run

    cases = [
        PromptCase(f"mp3-{rate}{'-stereo' if st else ''}", coded("MP3", None, rate, st), OK)
        for rate, st in [(8000, False), (16000, False), (22050, True), (44100, False), (48000, True)]
    ]
    cases += [
        PromptCase("ogg-vorbis-16k", coded("OGG", "VORBIS", 16000), OK),
        PromptCase("ogg-vorbis-44k1-stereo", coded("OGG", "VORBIS", 44100, True), OK),
        PromptCase("ogg-opus-48k", coded("OGG", "OPUS", 48000), OK),
        PromptCase("ogg-opus-16k", coded("OGG", "OPUS", 16000), OK),
        PromptCase("flac-16", coded("FLAC", "PCM_16", 16000), OK),
        PromptCase("flac-24-48k", coded("FLAC", "PCM_24", 48000), OK),
        PromptCase("flac-8bit", coded("FLAC", "PCM_S8", 16000), OK),
        PromptCase("mp3-cut-in-half", damaged(coded("MP3", None, 16000), 0.5), EITHER),
        PromptCase("mp3-tail-random", damaged(coded("MP3", None, 16000), 0.3, noise=True), EITHER),
        PromptCase("ogg-cut-in-half", damaged(coded("OGG", "VORBIS", 16000), 0.5), EITHER),
        PromptCase("ogg-body-random", damaged(coded("OGG", "VORBIS", 16000), 0.05, noise=True), EITHER),
        PromptCase("opus-cut-early", damaged(coded("OGG", "OPUS", 48000), 0.1), EITHER),
        PromptCase("flac-cut-in-half", damaged(coded("FLAC", "PCM_16", 16000), 0.5), EITHER),
        PromptCase("flac-body-random", damaged(coded("FLAC", "PCM_16", 16000), 0.1, noise=True), EITHER),
        PromptCase("flac-header-only", damaged(coded("FLAC", "PCM_16", 16000), 0.01), ERROR),
    ]
    return cases


def _extension_cases() -> list[PromptCase]:
    def named(name: str, fmt: str = "WAV", subtype: str | None = None) -> Callable[[Kit], Path]:
        return lambda kit: kit.file(name, encode(kit.speech, 16000, fmt, subtype))

    return [
        PromptCase("wav-named-mp3", named("speech.mp3"), OK),
        PromptCase("wav-named-ogg", named("speech.ogg"), OK),
        PromptCase("wav-named-txt", named("speech.txt"), OK),
        PromptCase("wav-no-extension", named("speech"), OK),
        PromptCase("flac-named-wav", named("speech.wav", "FLAC"), OK),
        PromptCase("ogg-named-mp3", named("speech.mp3", "OGG", "VORBIS"), OK),
        PromptCase("mp3-named-wav", named("speech-mp3.wav", "MP3"), EITHER),
        PromptCase("mp3-named-flac", named("speech-mp3.flac", "MP3"), EITHER),
        PromptCase(
            "text-named-wav", lambda kit: kit.file("notes.wav", b"These are my notes, not audio.\n" * 40), ERROR
        ),
        PromptCase("png-named-wav", lambda kit: kit.file("p.wav", b"\x89PNG\r\n\x1a\n" + kit.rng.bytes(3000)), ERROR),
        PromptCase("zip-named-flac", lambda kit: kit.file("a.flac", b"PK\x03\x04" + kit.rng.bytes(3000)), ERROR),
        PromptCase("pdf-named-ogg", lambda kit: kit.file("d.ogg", b"%PDF-1.7\n" + kit.rng.bytes(3000)), ERROR),
        PromptCase("html-named-mp3", lambda kit: kit.file("x.mp3", b"<!doctype html><p>hi</p>" * 50), ERROR),
        PromptCase(
            "onnx-named-wav", lambda kit: kit.file("voice.wav", b"\x08\x07\x12\x07pytorch" + kit.rng.bytes(900)), ERROR
        ),
    ]


def _content_cases() -> list[PromptCase]:
    def tone(kit: Kit) -> np.ndarray:
        t = np.arange(4 * 16000) / 16000
        return (0.3 * np.sin(2 * np.pi * 150 * t)).astype(np.float32)

    return [
        PromptCase("digital-silence", lambda kit: encode(np.zeros(64000, np.float32), 16000), ERROR, "silent"),
        PromptCase("dc-offset-only", lambda kit: encode(np.full(64000, 0.5, np.float32), 16000), ERROR),
        PromptCase("white-noise", lambda kit: encode(kit.rng.uniform(-1, 1, 64000).astype(np.float32), 16000), ERROR),
        PromptCase("pure-tone", lambda kit: encode(tone(kit), 16000), EITHER),
        PromptCase("square-wave-full-scale", lambda kit: encode(np.sign(tone(kit)), 16000), EITHER),
        PromptCase(
            "speech-at-minus-70-db", lambda kit: encode(kit.speech * np.float32(10 ** (-70 / 20)), 16000), EITHER
        ),
        PromptCase("speech-clipped-hard", lambda kit: encode(np.clip(kit.speech * 30, -1, 1), 16000), OK),
        PromptCase(
            "speech-plus-loud-noise",
            lambda kit: encode(
                np.clip(kit.speech + kit.rng.normal(0, 0.3, len(kit.speech)), -1, 1).astype(np.float32), 16000
            ),
            EITHER,
        ),
        PromptCase("speech-with-dc-offset", lambda kit: encode(np.clip(kit.speech * 0.5 + 0.4, -1, 1), 16000), OK),
        PromptCase("speech-reversed", lambda kit: encode(kit.speech[::-1].copy(), 16000), OK),
        PromptCase(
            "speech-in-long-silence",
            lambda kit: encode(np.concatenate([np.zeros(16000 * 50, np.float32), kit.speech]), 16000),
            OK,
        ),
    ]


def _size_cases() -> list[PromptCase]:
    def ten_minutes(fill: str) -> Callable[[Kit], Path]:
        def build(kit: Kit) -> Path:
            frames = 600 * 8000
            if fill == "speech":
                audio = np.resize(kit.speech_at(8000), frames)
            elif fill == "noise":
                audio = kit.rng.uniform(-0.5, 0.5, frames).astype(np.float32)
            else:
                audio = np.zeros(frames, np.float32)
            return kit.file(f"ten-minutes-{fill}.wav", encode(audio, 8000, subtype="PCM_16"))

        return build

    return [
        PromptCase("ten-minutes-speech", ten_minutes("speech"), OK),
        PromptCase("ten-minutes-silence", ten_minutes("silence"), ERROR, "silent"),
        PromptCase("ten-minutes-noise", ten_minutes("noise"), ERROR),
        PromptCase("just-under-limit-file", lambda kit: kit.file("big.wav", sized_wav(kit, LIMIT - 4096)), OK),
        PromptCase("exactly-at-limit-bytes", lambda kit: sized_wav(kit, LIMIT), OK),
        PromptCase("one-byte-over-limit-bytes", lambda kit: sized_wav(kit, LIMIT + 1), ERROR, "larger than 50 MB"),
        PromptCase("sparse-51-mb-file", lambda kit: sparse_wav(kit, "sparse51.wav", 51 * 2**20), ERROR, "larger than"),
        PromptCase("sparse-2-gb-file", lambda kit: sparse_wav(kit, "sparse2g.wav", 2**31), ERROR, "larger than"),
        PromptCase(
            "sparse-8-gb-file-named-mp3", lambda kit: sparse_wav(kit, "sparse8g.mp3", 2**33), ERROR, "larger than"
        ),
    ]


def _transcript_cases() -> list[PromptCase]:
    texts = {
        "transcript-unrelated": "The weather in Lisbon is mild in the winter months.",
        "transcript-chinese": "今天天气很好，我们去公园散步吧。",
        "transcript-control-chars": "And you\x00 always\x1b[31m want\u202e to see it.",
        "transcript-20k-chars": "superlative " * 1700,
        "transcript-empty": "",
    }
    return [PromptCase(name, lambda kit: _speech_wav(kit), OK, transcript=text) for name, text in texts.items()]


PROMPT_CASES: list[PromptCase] = [
    *_random_byte_cases(),
    *_truncated_cases(),
    *_header_cases(),
    *_empty_and_tiny_cases(),
    *_non_finite_cases(),
    *_layout_cases(),
    *_compressed_cases(),
    *_extension_cases(),
    *_content_cases(),
    *_size_cases(),
    *_transcript_cases(),
]


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    audio, rate = sf.read(SPEECH, dtype="float32")
    assert rate == 16000
    return audio


def kit_for(name: str, speech: np.ndarray, folder: Path) -> Kit:
    index = next(i for i, c in enumerate(PROMPT_CASES) if c.name == name)
    return Kit(speech, np.random.default_rng([SEED, index]), folder)


@pytest.mark.parametrize("case", PROMPT_CASES, ids=lambda c: c.name)
def test_prompt_case(case: PromptCase, speech: np.ndarray, tmp_path: Path) -> None:
    source = case.build(kit_for(case.name, speech, tmp_path))
    prompt = expect(case.outcome, lambda: load_prompt(source, case.transcript), case.match)
    if prompt is None:
        return
    assert isinstance(prompt, PromptAudio) and prompt.sample_rate == 16000
    assert_valid_audio(prompt.samples, prompt.sample_rate, 1.0, 60.0)  # cut to the 30 s rule
    assert prompt.transcript == case.transcript
    assert all(n.endswith(".") and len(n) < 200 for n in prompt.notices)


# ---------------------------------------------------------------- text and control cases, through the engine

SCRIPTS: dict[str, Sequence[str]] = {
    "latin": "abcdefghijklmnopqrstuvwxyzàéîõüßçñ",
    "cjk": "你好世界今天天气很好漢字日本語テストかな",
    "arabic": "مرحبابالعالمكيفحالك",
    "cyrillic": "приветмирдобрыйдень",
    "hebrew": "שלוםעולם",
    "devanagari": "नमस्तेदुनिया",
    "greek": "γειασουκοσμε",
    "thai": "สวัสดีชาวโลก",
    "hangul": "안녕하세요세계",
    "emoji": ["😀", "🎉", "👍🏽", "❤️", "🔥", "🚀", "🇵🇹", "👨‍👩‍👧", "🤖", "🎵"],
}
CONTROL_CHARS = ["\x00", "\x07", "\x08", "\x1b[31m", "\r", "\n", "\t", "\x7f", "\x85", "\x9b", "\u202e", "\ufeff"]
ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff"]
PUNCTUATION = [*"!?.,;:-'\"()[]{}/\\|~^*_`", "—", "…", "«", "»", "¿", "¡", "。", "、", "！", "？", "·", "【", "】"]


@dataclass(frozen=True)
class TextCase:
    name: str
    text: Any
    outcome: str
    match: str = ""
    controls: tuple[tuple[str, Any], ...] = ()
    audible: bool = True  # a success must be more than silence


def _pick(rng: np.random.Generator, alphabet: Sequence[str], count: int) -> str:
    return "".join(str(alphabet[int(i)]) for i in rng.integers(0, len(alphabet), count))


def _generated_text_cases() -> list[TextCase]:
    cases: list[TextCase] = []
    for i in range(16):
        rng = np.random.default_rng([SEED, 1, i])
        scripts = rng.choice(sorted(SCRIPTS), size=int(rng.integers(2, 4)), replace=False)
        words = [_pick(rng, SCRIPTS[s], int(rng.integers(1, 3))) for s in scripts]
        cases.append(TextCase(f"mixed-scripts-{i:02d}-{'-'.join(scripts)}", " ".join(words), EITHER, audible=False))
    for i in range(10):
        rng = np.random.default_rng([SEED, 2, i])
        word = _pick(rng, SCRIPTS["latin"][:26], 5)
        chars = [CONTROL_CHARS[int(k)] for k in rng.integers(0, len(CONTROL_CHARS), 3)]
        cases.append(TextCase(f"control-chars-{i:02d}", f"{chars[0]}{word[:2]}{chars[1]}{word[2:]}{chars[2]} ok.", OK))
    for i in range(6):
        rng = np.random.default_rng([SEED, 3, i])
        word = "hi all"
        text = "".join(ch + _pick(rng, ZERO_WIDTH, int(rng.integers(0, 3))) for ch in word)
        cases.append(TextCase(f"zero-width-inside-words-{i}", text, OK))
    for i in range(8):
        rng = np.random.default_rng([SEED, 4, i])
        cases.append(
            TextCase(f"only-punctuation-{i}", _pick(rng, PUNCTUATION, int(rng.integers(1, 12))), EITHER, audible=False)
        )
    for i in range(6):
        rng = np.random.default_rng([SEED, 5, i])
        cases.append(
            TextCase(f"only-emoji-{i}", _pick(rng, SCRIPTS["emoji"], int(rng.integers(1, 4))), EITHER, audible=False)
        )
    return cases


def _fixed_text_cases() -> list[TextCase]:
    words = " ".join(["superlative"] * 9100)[:100_000]
    return [
        TextCase("empty", "", ERROR, "type some text"),
        TextCase("whitespace-only", " \t\n\u3000\u00a0 ", ERROR, "type some text"),
        TextCase("control-chars-only", "".join(c for c in CONTROL_CHARS if len(c) == 1) * 3, ERROR, "type some text"),
        TextCase("zero-width-only", "".join(ZERO_WIDTH) * 20, ERROR, "type some text"),
        TextCase("not-a-string-bytes", b"hello", ERROR, "type some text"),
        TextCase("not-a-string-int", 12345, ERROR, "type some text"),
        TextCase("not-a-string-none", None, ERROR, "type some text"),
        TextCase("100k-characters", words, ERROR, "100,000 characters"),
        TextCase("100k-full-stops", "." * 100_000, ERROR, "limit"),
        TextCase("5001-characters", "a" * 5001, ERROR, "limit is 5,000"),
        TextCase("100k-spaces-around-a-word", " " * 50_000 + "Hello." + " " * 50_000, OK),
        TextCase("100k-zero-width-around-a-word", "\u200b" * 50_000 + "Hello." + "\u200b" * 50_000, OK),
        TextCase("100k-newlines", "\n" * 100_000, ERROR, "type some text"),
        TextCase("lone-surrogate", "Hi \ud800 there.", EITHER),
        TextCase("zalgo", "Z\u0334\u0321a\u0337l\u0336g\u0338o\u0335 text.", OK),
        TextCase("rtl-override-numbers", "\u202eCall 555 0199 now.\u202c", OK),
        TextCase("espeak-phoneme-brackets", "[[h@'loU w3:ld]] test.", EITHER),
        TextCase("ssml-tags", "<speak>Hi<break time='99s'/></speak>", EITHER),
        TextCase("format-strings", "%s %n {0} $(reboot)", EITHER),
        TextCase("numbers-edge", "NaN -0 1e308", EITHER),
        TextCase("one-letter", "a", OK),
        TextCase("long-single-word", "Pneumonoultramicroscopicsilicovolcanoconiosis", OK),
        TextCase("many-tiny-sentences", "A. B. C. D. E. F. G. H.", OK),
        TextCase("only-digits", "0123456789", OK),
        TextCase("fullwidth-latin", "\uff28\uff45\uff4c\uff4c\uff4f \uff57\uff4f\uff52\uff4c\uff44\uff0e", EITHER),
        TextCase("emoji-between-words", "Good 🔥 morning 🚀 all.", OK),
    ]


def _control_cases() -> list[TextCase]:
    bad: list[tuple[str, Any, str]] = [
        ("speed", math.nan, "speed"),
        ("speed", math.inf, "speed"),
        ("speed", 0.0, "speed"),
        ("speed", -1.0, "speed"),
        ("speed", 100.0, "speed"),
        ("noise_scale", -0.1, "noise scale"),
        ("noise_scale", math.nan, "noise scale"),
        ("noise_w", 1e9, "noise w"),
        ("noise_w", -math.inf, "noise w"),
        ("temperature", 0.7, "does not apply to the loaded voice"),
        ("sentence_silence_s", -1.0, "silence between sentences"),
        ("sentence_silence_s", math.nan, "silence between sentences"),
        ("sentence_silence_s", 1e9, "silence between sentences"),
        ("language", "fr", "this voice speaks English"),
        ("seed", 2**64, "seed"),
        ("seed", -(2**70), "seed"),
    ]
    good: list[tuple[str, Any]] = [
        ("speed", 0.25),
        ("speed", 4.0),
        ("language", "en"),
        ("noise_scale", 0.0),
        ("noise_w", 2.0),
        ("sentence_silence_s", 5.0),
        ("seed", 2**63 - 1),
        ("seed", -1),
        ("seed", 0),
    ]
    cases = [
        TextCase(f"control-{name}={value!r}", "Hi. Bye.", ERROR, match, ((name, value),)) for name, value, match in bad
    ]
    cases += [TextCase(f"control-{name}={value!r}-ok", "Hi. Bye.", OK, "", ((name, value),)) for name, value in good]
    return cases


TEXT_CASES = [*_generated_text_cases(), *_fixed_text_cases(), *_control_cases()]
REQUEST_FIELDS = ("speed", "sentence_silence_s", "seed", "language")


def plausible_seconds(text: str) -> float:
    """An upper bound on speech for ``text``: espeak reads symbols and emoji by name, so be generous."""
    return 3.0 + 1.0 * len(text.strip()) + 5.0 * sum(text.count(c) for c in ".!?")


@pytest.fixture(scope="module")
def engine() -> Iterator[EngineClient]:
    settings = Settings(device="cpu", torch_threads=1, queue_size=64, job_timeout_s=REQUEST_TIMEOUT_S)
    with EngineClient(settings) as client:
        client.wait_ready()
        yield client


@pytest.fixture(scope="module")
def first_pid(engine: EngineClient) -> int:
    """The worker pid before any case ran; no case may replace the worker."""
    return engine.status().worker_pid


def run_on(engine: EngineClient, request: SynthesisRequest) -> SynthesisResult:
    return engine.synthesize(request, timeout=REQUEST_TIMEOUT_S)


def check_result(result: SynthesisResult, request: SynthesisRequest, max_s: float, audible: bool) -> None:
    assert result.job_id == request.job_id
    assert result.audio.dtype == np.float32 and result.audio.ndim == 1 and len(result.audio) > 0
    assert np.isfinite(result.audio).all() and float(np.max(np.abs(result.audio))) <= 1.0
    assert 0.05 <= result.duration_s <= max_s, f"{result.duration_s:.2f} s of audio"
    if audible:
        assert float(np.max(np.abs(result.audio))) > 0.01, "speech expected, got silence"


@pytest.mark.parametrize("case", TEXT_CASES, ids=lambda c: c.name)
def test_text_case(case: TextCase, engine: EngineClient, first_pid: int) -> None:
    fields: dict[str, Any] = {"seed": 7}
    for name, value in case.controls:  # the backend's own options travel by name, the rest are request fields
        if name in REQUEST_FIELDS:
            fields[name] = value
        else:
            fields.setdefault("options", {})[name] = value
    request = SynthesisRequest(case.text, **fields)
    result = expect(case.outcome, lambda: run_on(engine, request), case.match)
    if result is not None:
        text = case.text if isinstance(case.text, str) else ""
        silence = dict(case.controls).get("sentence_silence_s", 0.2)
        check_result(result, request, plausible_seconds(text) + 2 * silence, case.audible)
    assert engine.status().worker_pid == first_pid, "a bad input replaced the worker"


# ---------------------------------------------------------------- prompts attached to engine requests


def _unchecked_prompt(samples: np.ndarray) -> PromptAudio:
    """A PromptAudio that never went through intake (an API caller skipping validation)."""
    return PromptAudio(np.asarray(samples, dtype=np.float32), 16000, f"{len(samples):064x}")


ENGINE_PROMPT_CASES: list[PromptCase] = [
    PromptCase("engine-prompt-unrelated-transcript", _speech_wav, OK, transcript="Completely different words."),
    PromptCase("engine-prompt-8ch-flac", lambda kit: encode(np.tile(kit.speech[:, None], (1, 8)), 16000, "FLAC"), OK),
    PromptCase("engine-prompt-w64-24bit", lambda kit: encode(kit.speech, 16000, "W64", "PCM_24"), OK),
]
UNCHECKED_PROMPTS = {
    "engine-unchecked-prompt-silent": np.zeros(32000),
    "engine-unchecked-prompt-empty": np.zeros(0),
}


@pytest.mark.parametrize("case", ENGINE_PROMPT_CASES, ids=lambda c: c.name)
def test_prompt_through_engine(
    case: PromptCase, engine: EngineClient, first_pid: int, speech: np.ndarray, tmp_path: Path
) -> None:
    """Accepted prompts cross the process boundary and are matched; the lossless copies share one profile."""
    prompt = load_prompt(case.build(Kit(speech, np.random.default_rng(SEED), tmp_path)), case.transcript)
    request = SynthesisRequest("Hello there.", seed=3, prompt=prompt)
    result = run_on(engine, request)
    check_result(result, request, plausible_seconds(request.text), audible=True)
    assert result.similarity is not None and -1.0 <= result.similarity <= 1.0
    assert result.profile_cache is not None and result.profile_cache.size == 1, "lossless copies are one voice"
    assert engine.status().worker_pid == first_pid


@pytest.mark.parametrize("name", list(UNCHECKED_PROMPTS))
def test_unchecked_prompt_through_engine(name: str, engine: EngineClient, first_pid: int) -> None:
    request = SynthesisRequest("Hello there.", seed=3, prompt=_unchecked_prompt(UNCHECKED_PROMPTS[name]))
    expect(ERROR, lambda: run_on(engine, request), "voice prompt")
    assert engine.status().worker_pid == first_pid


# ---------------------------------------------------------------- the batch as a whole


def test_engine_is_healthy_after_the_batch(engine: EngineClient, first_pid: int) -> None:
    """After every case above: same worker, no restarts, and a normal request gives normal speech."""
    request = SynthesisRequest("The engine is still healthy after all of that.", seed=1)
    result = run_on(engine, request)
    check_result(result, request, 8.0, audible=True)
    assert result.duration_s > 1.5
    status = engine.status()
    assert status.worker_pid == first_pid and status.restarts == 0 and status.ready
    assert status.queue_length == 0 and status.in_flight_job is None


def test_the_suite_is_big_and_broad() -> None:
    """At least 200 generated cases over the categories of bad input a user can send."""
    cases: list[PromptCase | TextCase] = [*PROMPT_CASES, *TEXT_CASES, *ENGINE_PROMPT_CASES]
    names = [c.name for c in cases] + list(UNCHECKED_PROMPTS)
    assert len(names) == len(set(names)) and len(names) >= 200
    for category in ("random-bytes", "truncated-wav", "empty", "one-sample", "nan", "192k-8ch", "ten-minutes",
                     "under-limit", "over-limit", "named", "mp3", "ogg", "flac", "control-chars", "mixed-scripts",
                     "zero-width", "100k", "only-punctuation", "only-emoji", "transcript"):  # fmt: skip
        assert any(category in n for n in names), category
