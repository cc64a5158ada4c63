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
import hashlib
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
import numpy as np

from voicelab.backends.mandarin import LICENSE_NOTICE as MANDARIN_LICENSE
from voicelab.engine.messages import ChunkReady, JobProgress, SynthesisResult
from voicelab.engine.validation import (
    MAX_TRANSCRIPT_CHARS,
    NO_LIMIT,
    SILENCE_LIMITS,
    SPEED_LIMITS,
    as_number,
    as_seed,
    as_text,
    as_whole,
)
from voicelab.errors import InvalidPromptError, StorageError
from voicelab.history import encode_wav
from voicelab.instruct.controls import UNSPECIFIED, controls_to_style
from voicelab.instruct.style import Style
from voicelab.judges.scale import SIMILARITY_SCALE
from voicelab.owners import login_named
from voicelab.studio import MAX_TAKES, GenerationRequest, GenerationService, PromptClip, Queued, Take
from voicelab.subtitles import cues, to_srt
from voicelab.ui.cache import UploadCache
from voicelab.ui.edges import login_of, shows_errors, upload_path
from voicelab.ui.edges import seed_for as seed_for  # re-exported: older callers import it from here
from voicelab.ui.progress import SentenceCount, progress_line, queued_line
from voicelab.ui.style_actions import CONTROL_NAMES as CONTROL_NAMES  # re-exported with the style functions below
from voicelab.ui.style_actions import apply_preset as apply_preset
from voicelab.ui.style_actions import describe_parsed, style_labels
from voicelab.ui.style_actions import describe_style as describe_style
from voicelab.ui.style_actions import preview_style as preview_style
from voicelab.ui.style_actions import show_takes as show_takes
from voicelab.voice.prompt import PromptAudio
from voicelab.voices import VoiceStore

log = logging.getLogger(__name__)

AudioValue = str | tuple[int, np.ndarray]
DISK_FULL = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})
SpeakOutputs = tuple[Any, Any, Any, str]  # live chunk, subtitles file, saved audio, status line


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
        cache: UploadCache | None = None,
        admins: frozenset[str] = frozenset(),
    ) -> None:
        self.service = service
        self.cache_dir = cache_dir
        self.streaming = streaming
        self.voices = voices
        self.cache = cache
        self.admins = admins

    def end_session(self, request: gr.Request) -> None:
        """The browser tab closed: the prompts it uploaded leave Gradio's cache."""
        if self.cache is not None:
            self.cache.end_session(request.session_hash)

    def saved_prompt(self, voice_id: str | None, request: gr.Request | None = None) -> PromptClip | None:
        """A saved voice of the caller's as the prompt to clone (None: the built-in voices as they are)."""
        if not voice_id or not voice_id.strip():
            return None
        if self.voices is None:
            raise InvalidPromptError("Saved voices are not available in this studio.")
        voice = self.voices.get(voice_id.strip(), login_named(login_of(request), self.admins).viewer)
        return PromptClip(voice.clip_path, voice.transcript, voice)

    def options(self, noise_scale: object, noise_w: object) -> dict[str, float]:
        """The Advanced sliders, kept only where the loaded backend has such an option (checked by its limits)."""
        capabilities = self.service.capabilities()
        given = {"noise_scale": noise_scale, "noise_w": noise_w}
        checked: dict[str, float] = {}
        for name, value in given.items():
            spec = capabilities.option(name)
            if value is not None and spec is not None:
                checked[name] = as_number(spec.label, value, (spec.low, spec.high))
        return checked

    def prune(self) -> None:
        """Keep Gradio's cache within its bounds before adding to it."""
        if self.cache is not None:
            self.cache.prune()

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
        heard, pieces, sentences = 0.0, [], SentenceCount(prepared.requests[0].text)
        for event in self.service.follow(prepared):
            if isinstance(event, Queued):
                yield gr.skip(), gr.skip(), gr.skip(), queued_line(event), None
            elif isinstance(event, JobProgress):
                yield gr.skip(), gr.skip(), gr.skip(), progress_line(event), None
            elif isinstance(event, ChunkReady):
                heard += event.chunk.duration_s
                pieces.append((event.chunk.text, event.chunk.duration_s))
                sentences.add(event)
                live = encode_wav(event.chunk.audio, event.chunk.sample_rate) if self.streaming else gr.skip()
                yield live, gr.skip(), gr.skip(), sentences.line(event, heard), None
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
        text: object,
        prompt: PromptClip | None,
        speed: object,
        noise_scale: object,
        noise_w: object,
        silence_s: object,
        seed: object,
        language: object,
        instruction: object = "",
        style: Style | None = None,
        owner: str = "",
    ) -> GenerationRequest:
        """The Speak and Clone tabs' widgets as one request (the same controls on both tabs), raw values coerced;
        a null speed or silence takes its default, like the other controls."""
        given: dict[str, Any] = {}
        if speed is not None:
            given["speed"] = as_number("Speed", speed, SPEED_LIMITS)
        if silence_s is not None:
            given["sentence_silence_s"] = as_number("Silence between sentences", silence_s, SILENCE_LIMITS)
        return GenerationRequest(
            text=as_text("The text to speak", text, NO_LIMIT),
            kind=kind,
            language=as_text("The language", language, 16) or "auto",
            prompt=prompt,
            instruction=as_text("The style instruction", instruction),
            style=style or Style(),
            seed=as_seed(seed),
            options=self.options(noise_scale, noise_w),
            owner=owner,
            **given,
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
        request: gr.Request | None = None,
    ) -> Iterator[SpeakOutputs]:
        """The Speak tab's Generate button."""
        controls = (speed, noise_scale, noise_w, silence_s, seed, language)
        asked = self.spoken_request("speak", text, None, *controls, owner=login_of(request))
        self.prune()
        for live, srt, saved, status, _ in self.run_streaming(asked):
            yield live, srt, saved, status

    @shows_errors
    def clone(
        self,
        prompt: str | dict[str, Any] | None,
        transcript: str,
        text: str,
        speed: float,
        noise_scale: float,
        noise_w: float,
        silence_s: float,
        seed: float | None,
        language: str = "auto",
        instruction: str = "",
        age: str | None = UNSPECIFIED,
        gender: str | None = UNSPECIFIED,
        pitch: str | None = UNSPECIFIED,
        pitch_variation: str | None = UNSPECIFIED,
        volume: str | None = UNSPECIFIED,
        pace: str | None = UNSPECIFIED,
        emotion: str | None = UNSPECIFIED,
        request: gr.Request | None = None,
    ) -> Iterator[tuple[Any, Any, Any, str, Any]]:
        """The Clone tab's button: clone the prompt and, in the same request, apply the style controls.

        The prompt's sentence comes at once, before anything is queued. ``pace`` is the Speed dropdown.
        """
        prompt_path = upload_path("The voice prompt", prompt)
        if not prompt_path:
            raise InvalidPromptError("Please upload or record a voice prompt first.")
        if self.cache is not None and not Path(prompt_path).resolve().is_relative_to(self.cache.root.resolve()):
            raise InvalidPromptError("The voice prompt must be a file uploaded to this server; please upload it.")
        if self.cache is not None and request is not None:
            self.cache.remember_prompt(request.session_hash, prompt_path)
        self.prune()
        clip = PromptClip(prompt_path, as_text("The transcript of the prompt", transcript, MAX_TRANSCRIPT_CHARS))
        style = controls_to_style(*style_labels((age, gender, pitch, pitch_variation, volume, pace, emotion)))
        controls = (speed, noise_scale, noise_w, silence_s, seed, language, instruction, style)
        asked = self.spoken_request("clone", text, clip, *controls, owner=login_of(request))
        for live, srt, saved, status, shown in self.run_streaming(asked):
            if shown is None:
                yield live, srt, saved, status, gr.skip()
            else:
                used = shown.take.request.prompt
                yield live, srt, saved, status, clone_figures(shown.take.result, used) if used else ""

    @shows_errors
    def design(
        self,
        text: str,
        takes: float,
        voice_id: str | None,
        instruction: str,
        age: str | None = UNSPECIFIED,
        gender: str | None = UNSPECIFIED,
        pitch: str | None = UNSPECIFIED,
        pitch_variation: str | None = UNSPECIFIED,
        volume: str | None = UNSPECIFIED,
        speed: str | None = UNSPECIFIED,
        emotion: str | None = UNSPECIFIED,
        request: gr.Request | None = None,
    ) -> tuple[Any, ...]:
        """The Design tab's Generate: one resolved style on the built-in or a saved voice, ``takes`` fresh seeds."""
        count = as_whole("Takes", takes, (1, MAX_TAKES))
        labels = style_labels((age, gender, pitch, pitch_variation, volume, speed, emotion))
        self.prune()
        asked = GenerationRequest(
            text=as_text("The text to speak", text, NO_LIMIT),
            kind="design",
            prompt=self.saved_prompt(as_text("The voice", voice_id, 64), request),
            instruction=as_text("The style instruction", instruction),
            style=controls_to_style(*labels),
            takes=count,
            owner=login_of(request),
        )
        generation = self.service.generate(asked)
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


def similarity_line(result: SynthesisResult) -> str:
    """The judge's similarity (ECAPA, which the matching never reads), GE2E's beside it, and what the scale means."""
    matched = result.similarity_base is not None
    ecapa = f"{result.similarity_base:.2f} → {result.similarity:.2f}" if matched else f"{result.similarity:.2f}"
    line = f"**Similarity to the prompt:** {ecapa}{' (base voice → matched)' if matched else ''}"
    if result.similarity_ge2e is not None:
        ge2e = f"{result.similarity_ge2e:.2f}"
        if result.similarity_ge2e_base is not None:
            ge2e = f"{result.similarity_ge2e_base:.2f} → {ge2e}"
        line += f" · GE2E, the measure the matching maximises: {ge2e}"
    return f"{line}\n\n<small>{SIMILARITY_SCALE}</small>"


def clone_figures(result: SynthesisResult, prompt: PromptAudio) -> str:
    """Similarity before → after matching, prompt vs output pitch, and what intake changed."""
    lines = []
    if result.similarity is not None:
        lines.append(similarity_line(result))
    if result.f0_prompt_hz is not None and result.f0_output_hz is not None:
        lines.append(f"**Median pitch:** prompt {result.f0_prompt_hz:.0f} Hz · output {result.f0_output_hz:.0f} Hz")
    lines.append(f"**Prompt:** {prompt.duration_s:.1f} s used · sha256 {prompt.sha256[:12]}")
    if result.fitted is not None:
        fit = result.fitted
        lines.append(
            f"**Fitted voice:** from {fit.start_voice}, GE2E {fit.ge2e_start:.3f} → {fit.ge2e_fitted:.3f} "
            f"on a held-out sentence ({fit.steps} steps, {fit.seconds:.0f} s, once per voice)"
        )
    cache = result.profile_cache
    if cache is not None:
        lines.append(
            f"**Profile cache:** {cache.size} of {cache.capacity} voices · hit rate {cache.hit_rate:.0%} "
            f"({cache.hits} hits, {cache.misses} misses)"
            + (f" · {cache.fitted_voices} fitted" if cache.fitted_voices else "")
        )
    return "\n\n".join(lines)  # intake's notices are in the status line, shown once
