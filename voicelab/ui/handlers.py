"""What the Generate buttons do: build a request, run it on the engine, save it to history, describe it.

Handlers are a few lines each. Errors the user can act on are ``VoiceLabError``s; :func:`shows_errors` turns
them into ``gr.Error`` with exactly their sentence (no traceback). A failed save to history is not an error
for the user: the audio is still returned and the status line says why it was not kept. The unsaved audio is
written as a WAV into Gradio's cache folder here (so Gradio does not copy it), which lets a failing write (a full
disk) reach the user as one sentence instead of Gradio's postprocess error.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import logging
import os
import tempfile
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, Protocol, TypeVar

import gradio as gr
import numpy as np

from voicelab.engine.client import EngineStatus, RestartReport
from voicelab.engine.messages import CleanReport, PromptAudio, SegmentSnapshot, SynthesisRequest, SynthesisResult
from voicelab.engine.validation import clean_text
from voicelab.errors import (
    InvalidPromptError,
    InvalidSettingError,
    JobTimeoutError,
    StorageError,
    VoiceLabError,
)
from voicelab.history import History, HistoryEntry, encode_wav
from voicelab.instruct.controls import UNSPECIFIED, controls_to_style, resolve_style
from voicelab.instruct.parser import ParsedInstruction
from voicelab.instruct.presets import get_preset
from voicelab.instruct.style import Style
from voicelab.settings import Settings
from voicelab.voice.intake import load_prompt

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

AudioValue = str | tuple[int, np.ndarray]
SPEED_LIMITS = (0.5, 2.0)
MAX_TAKES = 4
DISK_FULL = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})
CONTROL_NAMES = ("age", "gender", "pitch", "pitch_variation", "volume", "speed", "emotion")  # controls_to_style order


class Engine(Protocol):
    """The part of ``EngineClient`` the UI uses (tests may pass a stand-in)."""

    settings: Settings

    def submit(self, request: SynthesisRequest) -> Future[SynthesisResult]: ...

    def clean_cache(self, clear_profiles: bool = False) -> CleanReport: ...

    def soft_restart(self, force: bool = False) -> RestartReport: ...

    def memory_snapshot(self) -> SegmentSnapshot: ...

    def status(self) -> EngineStatus: ...


class JobTimeline(Protocol):
    """Where finished jobs are marked (the telemetry sampler's memory timeline)."""

    def mark_job(self, job_id: str, latency_s: float) -> None: ...


def shows_errors(handler: Callable[P, R]) -> Callable[P, R]:
    """Show a VoiceLabError as a Gradio error popup carrying exactly its sentence."""

    @functools.wraps(handler)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return handler(*args, **kwargs)
        except VoiceLabError as exc:
            log.info("shown to the user: %s", exc)
            raise gr.Error(str(exc), print_exception=False) from exc

    return wrapper


def length_scale_for(speed: float | None) -> float | None:
    """The speed slider as VITS length scale; speed 1 means "the voice's own" (``None``)."""
    if speed is None or speed == 1.0:
        return None
    if not SPEED_LIMITS[0] <= speed <= SPEED_LIMITS[1]:
        raise InvalidSettingError(f"Speed must be between {SPEED_LIMITS[0]} and {SPEED_LIMITS[1]}.")
    return round(1.0 / speed, 4)


def seed_for(value: float | None) -> int | None:
    """The seed box: blank or negative means a fresh random seed (shown afterwards)."""
    if value is None or value < 0:
        return None
    return int(value)


def metadata_line(result: SynthesisResult) -> str:
    """One line a user reads after each generation."""
    parts = [
        f"latency {result.latency_s:.2f} s",
        f"RTF {result.rtf:.3f}",
        f"{result.duration_s:.2f} s of audio",
        result.device,
        result.dtype,
        f"seed {result.seed}" if result.seed is not None else "",
        f"queued {result.queue_wait_s:.1f} s" if result.queue_wait_s >= 0.1 else "",
    ]
    return " · ".join(p for p in parts if p)


@dataclass(frozen=True)
class Generation:
    """A finished job as the UI shows it: what to play, what to say about it, where it was kept."""

    result: SynthesisResult
    audio: AudioValue
    status: str
    entry: HistoryEntry | None


class Studio:
    """Runs generations for every tab; one per app, holding the engine and the history folder."""

    def __init__(
        self,
        engine: Engine,
        history: History,
        settings: Settings,
        timeline: JobTimeline | None = None,
        cache_dir: Path | None = None,
    ) -> None:
        """``cache_dir`` is Gradio's cache folder, where unsaved audio is written; ``None`` returns it as an array."""
        self.engine = engine
        self.history = history
        self.settings = settings
        self.timeline = timeline
        self.cache_dir = cache_dir

    @property
    def wait_s(self) -> float:
        """How long a handler waits: every queued job may use its full timeout before ours runs."""
        return self.settings.job_timeout_s * (self.settings.queue_size + 1) + 30.0

    def generate(self, request: SynthesisRequest, kind: str) -> Generation:
        """Submit (EngineBusyError at once when the queue is full), wait, keep it in history."""
        future = self.engine.submit(request)
        try:
            result = future.result(self.wait_s)
        except FutureTimeout as exc:
            raise JobTimeoutError("The engine did not answer in time; please try again.") from exc
        if self.timeline is not None:
            self.timeline.mark_job(result.job_id, result.latency_s)
        status = metadata_line(result)
        notices = " ".join(result.notices)
        entry: HistoryEntry | None = None
        audio: AudioValue = (result.sample_rate, result.audio)
        try:
            entry = self.history.save(request, result, kind)
            audio = str(entry.audio_path)
        except StorageError as exc:
            log.warning("generation %s not kept: %s", result.job_id, exc)
            gr.Warning(str(exc))
            notices = f"{notices} {exc}".strip()
            if self.cache_dir is not None:
                audio = str(write_playable(result, self.cache_dir))
        return Generation(result, audio, f"{status}\n\n{notices}".strip(), entry)

    @shows_errors
    def speak(
        self, text: str, speed: float, noise_scale: float, noise_w: float, silence_s: float, seed: float | None
    ) -> tuple[AudioValue, str]:
        """The Speak tab's Generate button."""
        request = SynthesisRequest(
            text=clean_text(text or "", self.settings.max_text_chars),
            length_scale=length_scale_for(speed),
            noise_scale=noise_scale,
            noise_w=noise_w,
            sentence_silence_s=silence_s,
            seed=seed_for(seed),
        )
        generation = self.generate(request, "speak")
        return generation.audio, generation.status

    @shows_errors
    def clone(
        self,
        prompt_path: str | None,
        transcript: str,
        text: str,
        speed: float,
        noise_scale: float,
        noise_w: float,
        silence_s: float,
        seed: float | None,
    ) -> tuple[AudioValue, str, str]:
        """The Clone tab's button: validate the prompt here (its sentence comes at once), then generate."""
        text = clean_text(text or "", self.settings.max_text_chars)
        if not prompt_path:
            raise InvalidPromptError("Please upload or record a voice prompt first.")
        prompt = load_prompt(prompt_path, (transcript or "").strip(), max_bytes=self.settings.max_upload_mb * 2**20)
        request = SynthesisRequest(
            text=text,
            length_scale=length_scale_for(speed),
            noise_scale=noise_scale,
            noise_w=noise_w,
            sentence_silence_s=silence_s,
            seed=seed_for(seed),
            prompt=prompt,
        )
        generation = self.generate(request, "clone")
        return generation.audio, generation.status, clone_figures(generation.result, prompt)

    @shows_errors
    def design(self, text: str, takes: float, instruction: str, *choices: str | None) -> tuple[Any, ...]:
        """The Design tab's Generate: one resolved style, ``takes`` generations with fresh seeds."""
        text = clean_text(text or "", self.settings.max_text_chars)
        parsed = resolve_style(instruction or "", controls_to_style(*choices))
        count = min(max(int(takes), 1), MAX_TAKES)
        done = [
            self.generate(SynthesisRequest(text=text, style=parsed.style, instruction=instruction or ""), "design")
            for _ in range(count)
        ]
        players = [gr.update(value=g.audio, visible=True) for g in done]
        players += [gr.update(value=None, visible=False) for _ in range(MAX_TAKES - count)]
        meta = "\n\n".join(f"take {i + 1}: {g.status}" for i, g in enumerate(done))
        return (*players, meta, describe_parsed(parsed))


def write_playable(result: SynthesisResult, cache_dir: Path) -> Path:
    """The WAV Gradio will serve, in its cache folder (named by content, like Gradio's own copies)."""
    data = encode_wav(result.audio, result.sample_rate)
    folder = cache_dir / hashlib.sha256(data).hexdigest()
    target = folder / f"{result.job_id}.wav"
    temp = ""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=folder, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, target)
    except OSError as exc:
        if temp:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        log.warning("cannot write playable audio for %s: %s", result.job_id, exc)
        if exc.errno in DISK_FULL:
            raise StorageError("The disk is full: the audio could not be saved or played.") from exc
        reason = exc.strerror or "unknown error"
        raise StorageError(f"The audio could not be saved or played ({reason}).") from exc
    return target


def clone_figures(result: SynthesisResult, prompt: PromptAudio) -> str:
    """Similarity before → after matching, prompt vs output pitch, and what intake changed."""
    lines = []
    if result.similarity is not None:
        base = f"{result.similarity_base:.2f} → " if result.similarity_base is not None else ""
        lines.append(f"**Similarity to the prompt:** {base}{result.similarity:.2f} (base voice → matched)")
    if result.f0_prompt_hz is not None and result.f0_output_hz is not None:
        lines.append(f"**Median pitch:** prompt {result.f0_prompt_hz:.0f} Hz · output {result.f0_output_hz:.0f} Hz")
    lines.append(f"**Prompt:** {prompt.duration_s:.1f} s used · sha256 {prompt.sha256[:12]}")
    cache = result.profile_cache
    if cache is not None:
        lines.append(
            f"**Profile cache:** {cache.size} of {cache.capacity} voices · hit rate {cache.hit_rate:.0%} "
            f"({cache.hits} hits, {cache.misses} misses)"
        )
    lines.extend(prompt.notices)
    return "\n\n".join(lines)


def describe_style(style: Style) -> str:
    """A style as a user reads it, e.g. "speed 0.75x · pitch +3.0 st · emotion happy"."""
    units = {
        "speed": lambda v: f"speed {v:g}x",
        "pitch_semitones": lambda v: f"pitch {v:+.1f} st",
        "pitch_range": lambda v: f"pitch range {v:g}x",
        "volume_db": lambda v: f"volume {v:+.0f} dB",
    }
    parts = [units[k](v) if k in units else f"{k} {v}" for k, v in style.to_dict().items()]
    return " · ".join(parts) if parts else "neutral (the voice as it is)"


def describe_parsed(parsed: ParsedInstruction) -> str:
    """What the instruction and dropdowns resolved to, and which words were not understood."""
    lines = [f"**Style:** {describe_style(parsed.style)}"]
    if parsed.matched:
        lines.append(f"**Understood:** {', '.join(parsed.matched)}")
    if parsed.not_understood:
        lines.append(f"**Not understood:** {', '.join(parsed.not_understood)}")
    return "\n\n".join(lines)


def preview_style(instruction: str, *choices: str | None) -> str:
    """Live preview under the instruction box (no generation); a bad input shows its sentence here."""
    try:
        return describe_parsed(resolve_style(instruction or "", controls_to_style(*choices)))
    except VoiceLabError as exc:
        return f"**{exc}**"


def show_takes(count: float) -> list[Any]:
    """As many players as takes asked for."""
    return [gr.update(visible=i < int(count)) for i in range(MAX_TAKES)]


def apply_preset(name: str | None) -> tuple[Any, ...]:
    """Picking a preset fills the instruction and sample text and resets the dropdowns."""
    if not name:
        return (gr.skip(), gr.skip(), *[gr.skip()] * len(CONTROL_NAMES))
    preset = get_preset(name)
    return (preset.instruction, preset.sample_text, *[UNSPECIFIED] * len(CONTROL_NAMES))
