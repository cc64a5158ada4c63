"""What the Generate buttons do: turn the widgets into a ``GenerationRequest``, call the service, show the result.

Handlers are a few lines each; validation, the engine, History and errors are the generation service's
(``voicelab.studio``). Errors the user can act on are ``VoiceLabError``s; :func:`shows_errors` turns them into
``gr.Error`` with exactly their sentence (no traceback). A failed save to History is not an error for the user:
the audio is still returned, a warning says why it was not kept, and the unsaved audio is written as a WAV into
Gradio's cache folder here (so a full disk reaches the user as one sentence, not Gradio's postprocess error).
Speak and Clone stream: the live player gets each chunk as the engine finishes it, the status line counts them.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import inspect
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import gradio as gr
import numpy as np

from voicelab.backends.mandarin import LICENSE_NOTICE as MANDARIN_LICENSE
from voicelab.engine.messages import ChunkReady, SynthesisResult
from voicelab.errors import InvalidPromptError, StorageError, VoiceLabError
from voicelab.history import encode_wav
from voicelab.instruct.controls import UNSPECIFIED, controls_to_style, resolve_style
from voicelab.instruct.parser import ParsedInstruction
from voicelab.instruct.presets import get_preset
from voicelab.instruct.style import Style
from voicelab.studio import MAX_TAKES, GenerationRequest, GenerationService, PromptClip, Take
from voicelab.subtitles import cues, to_srt
from voicelab.voice.prompt import PromptAudio
from voicelab.voices import VoiceStore

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

AudioValue = str | tuple[int, np.ndarray]
DISK_FULL = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})
CONTROL_NAMES = ("age", "gender", "pitch", "pitch_variation", "volume", "speed", "emotion")  # controls_to_style order
SpeakOutputs = tuple[Any, Any, Any, str]  # live chunk, subtitles file, saved audio, status line


def shows_errors(handler: Callable[P, R]) -> Callable[P, R]:
    """Show a VoiceLabError as a Gradio error popup carrying exactly its sentence (generators too)."""
    if inspect.isgeneratorfunction(handler):

        @functools.wraps(handler)
        def stream(*args: P.args, **kwargs: P.kwargs) -> Any:
            try:
                yield from handler(*args, **kwargs)  # type: ignore[misc]
            except VoiceLabError as exc:
                log.info("shown to the user: %s", exc)
                raise gr.Error(str(exc), print_exception=False) from exc

        return stream  # type: ignore[return-value]

    @functools.wraps(handler)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return handler(*args, **kwargs)
        except VoiceLabError as exc:
            log.info("shown to the user: %s", exc)
            raise gr.Error(str(exc), print_exception=False) from exc

    return wrapper


def seed_for(value: float | None) -> int | None:
    """The seed box: blank or negative means a fresh random seed (shown afterwards)."""
    if value is None or value < 0:
        return None
    return int(value)


def metadata_line(result: SynthesisResult) -> str:
    """One line a user reads after each generation."""
    parts = [
        f"latency {result.latency_s:.2f} s",
        f"first audio {result.first_audio_s:.2f} s" if result.chunks > 1 else "",
        f"RTF {result.rtf:.3f}",
        f"{result.duration_s:.2f} s of audio",
        result.device,
        result.dtype,
        f"seed {result.seed}" if result.seed is not None else "",
        f"queued {result.queue_wait_s:.1f} s" if result.queue_wait_s >= 0.1 else "",
        f"language {result.language}" if result.language else "",
    ]
    return " · ".join(p for p in parts if p)


def progress_line(chunk: ChunkReady, seconds: float) -> str:
    """Shown while a long text is still being made."""
    return f"Generating… part {chunk.index + 1} ready ({seconds:.1f} s of audio so far, {chunk.elapsed_s:.1f} s)"


@dataclass(frozen=True)
class Shown:
    """A finished take as the UI shows it: what to play and what to say about it."""

    take: Take
    audio: AudioValue
    status: str


class Studio:
    """The tabs' handlers over one ``GenerationService``; ``cache_dir`` is Gradio's, for unsaved audio."""

    def __init__(
        self,
        service: GenerationService,
        cache_dir: Path | None = None,
        streaming: bool = True,
        voices: VoiceStore | None = None,
    ) -> None:
        self.service = service
        self.cache_dir = cache_dir
        self.streaming = streaming
        self.voices = voices

    def saved_prompt(self, voice_id: str | None) -> PromptClip | None:
        """A saved voice as the prompt to clone (None: the built-in voices as they are)."""
        if not voice_id:
            return None
        if self.voices is None:
            raise InvalidPromptError("Saved voices are not available in this studio.")
        voice = self.voices.get(voice_id)
        return PromptClip(voice.clip_path, voice.transcript)

    def options(self, noise_scale: float | None, noise_w: float | None) -> dict[str, float]:
        """The Advanced sliders, kept only where the loaded backend has such an option."""
        names = {o.name for o in self.service.capabilities().options}
        given = {"noise_scale": noise_scale, "noise_w": noise_w}
        return {k: float(v) for k, v in given.items() if v is not None and k in names}

    def show(self, take: Take) -> Shown:
        """Where to play it from (the History file, else a WAV in Gradio's cache) and its status line."""
        notices = " ".join(take.result.notices)
        if "zh" in take.result.language.split("+"):
            notices = f"{notices} {MANDARIN_LICENSE}".strip()
        audio: AudioValue = (take.result.sample_rate, take.result.audio)
        if take.entry is not None:
            audio = str(take.entry.audio_path)
        else:
            if take.storage_error:
                gr.Warning(take.storage_error)
                notices = f"{notices} {take.storage_error}".strip()
            if self.cache_dir is not None:
                audio = str(write_playable(take.result, self.cache_dir))
        check = take.result.style_check
        styled = f"\n\n**Style, asked vs measured:** {check.line()}" if check is not None else ""
        return Shown(take, audio, f"{metadata_line(take.result)}{styled}\n\n{notices}".strip())

    def run_streaming(self, request: GenerationRequest) -> Iterator[tuple[Any, Any, Any, str, Shown | None]]:
        """(live chunk, subtitles, saved audio, status, finished take) as the engine makes them."""
        prepared = self.service.prepare(request)
        heard, pieces = 0.0, []
        for event in self.service.stream(prepared):
            if isinstance(event, ChunkReady):
                heard += event.chunk.duration_s
                pieces.append((event.chunk.text, event.chunk.duration_s))
                live = encode_wav(event.chunk.audio, event.chunk.sample_rate) if self.streaming else gr.skip()
                yield live, gr.skip(), gr.skip(), progress_line(event, heard), None
            else:
                shown = self.show(event)
                srt = self.subtitles(shown.take, pieces, request.sentence_silence_s)
                yield gr.skip(), srt, shown.audio, shown.status, shown

    def subtitles(self, take: Take, pieces: list[tuple[str, float]], gap_s: float) -> str | None:
        """The take's sentence-level SRT file in Gradio's cache folder (``None`` where nothing can be served)."""
        if self.cache_dir is None:
            return None
        text = to_srt(cues(pieces, gap_s)).encode("utf-8")
        try:
            return str(write_cached(text, self.cache_dir, f"{take.result.job_id}.srt"))
        except StorageError as exc:
            log.warning("no subtitles for %s: %s", take.result.job_id, exc)
            return None

    def spoken_request(
        self,
        kind: str,
        text: str,
        prompt: PromptClip | None,
        speed: float,
        noise_scale: float,
        noise_w: float,
        silence_s: float,
        seed: float | None,
        language: str,
    ) -> GenerationRequest:
        """The Speak and Clone tabs' widgets as one request (the same controls on both tabs)."""
        return GenerationRequest(
            text=text or "",
            kind=kind,
            language=language or "auto",
            prompt=prompt,
            speed=float(speed or 1.0),
            seed=seed_for(seed),
            sentence_silence_s=silence_s,
            options=self.options(noise_scale, noise_w),
        )

    @shows_errors
    def speak(
        self,
        text: str,
        speed: float,
        noise_scale: float,
        noise_w: float,
        silence_s: float,
        seed: float | None,
        language: str = "auto",
    ) -> Iterator[SpeakOutputs]:
        """The Speak tab's Generate button."""
        controls = (speed, noise_scale, noise_w, silence_s, seed, language)
        request = self.spoken_request("speak", text, None, *controls)
        for live, srt, saved, status, _ in self.run_streaming(request):
            yield live, srt, saved, status

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
        language: str = "auto",
    ) -> Iterator[tuple[Any, Any, Any, str, Any]]:
        """The Clone tab's button: the prompt's sentence comes at once, before anything is queued."""
        if not prompt_path:
            raise InvalidPromptError("Please upload or record a voice prompt first.")
        controls = (speed, noise_scale, noise_w, silence_s, seed, language)
        request = self.spoken_request("clone", text, PromptClip(prompt_path, transcript or ""), *controls)
        for live, srt, saved, status, shown in self.run_streaming(request):
            if shown is None:
                yield live, srt, saved, status, gr.skip()
            else:
                prompt = shown.take.request.prompt
                yield live, srt, saved, status, clone_figures(shown.take.result, prompt) if prompt else ""

    @shows_errors
    def design(
        self, text: str, takes: float, voice_id: str | None, instruction: str, *choices: str | None
    ) -> tuple[Any, ...]:
        """The Design tab's Generate: one resolved style on the built-in or a saved voice, ``takes`` fresh seeds."""
        count = min(max(int(takes), 1), MAX_TAKES)
        request = GenerationRequest(
            text=text or "",
            kind="design",
            prompt=self.saved_prompt(voice_id),
            instruction=instruction or "",
            style=controls_to_style(*choices),
            takes=count,
        )
        generation = self.service.generate(request)
        shown = [self.show(take) for take in generation.takes]
        players = [gr.update(value=s.audio, visible=True) for s in shown]
        players += [gr.update(value=None, visible=False) for _ in range(MAX_TAKES - count)]
        meta = "\n\n".join(f"take {i + 1}: {s.status}" for i, s in enumerate(shown))
        return (*players, meta, describe_parsed(generation.parsed))


def write_playable(result: SynthesisResult, cache_dir: Path) -> Path:
    """The WAV Gradio will serve, in its cache folder (named by content, like Gradio's own copies)."""
    return write_cached(encode_wav(result.audio, result.sample_rate), cache_dir, f"{result.job_id}.wav")


def write_cached(data: bytes, cache_dir: Path, name: str) -> Path:
    """``data`` as ``name`` in a content-named folder of Gradio's cache, written atomically."""
    folder = cache_dir / hashlib.sha256(data).hexdigest()
    target = folder / name
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
        log.warning("cannot write %s into Gradio's cache: %s", name, exc)
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
    return "\n\n".join(lines)  # intake's notices are in the status line, shown once


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
    if parsed.not_rendered:
        lines.append(f"**Not rendered** (read, but nothing the voice can do): {', '.join(parsed.not_rendered)}")
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
