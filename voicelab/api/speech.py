"""``POST /v1/audio/speech`` in OpenAI's shape: a thin adapter over ``GenerationService.prepare`` + ``stream``.

Everything that can be refused is refused before the first byte (validation, an unknown voice, a full queue):
the route waits for the first chunk before it answers, so a 4xx/429/503 is a real status, not a broken stream.
``model`` is accepted and ignored (the server has one loaded backend); ``language`` and ``seed`` are VoiceLab
extensions (``extra_body`` in the OpenAI client).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import logging
import secrets
import time
from collections.abc import Iterator
from typing import Literal

from fastapi import APIRouter
from fastapi.params import Depends
from fastapi.responses import PlainTextResponse, Response, StreamingResponse
from fastapi.sse import EventSourceResponse, format_sse_event
from pydantic import BaseModel, ConfigDict, Field, field_validator

from voicelab.api.audio import FORMATS, StreamEncoder, output_rate
from voicelab.api.auth import Caller
from voicelab.api.context import ApiContext
from voicelab.api.errors import ApiError, api_field, status_of
from voicelab.engine.messages import ChunkReady, JobProgress
from voicelab.engine.validation import MAX_FIELD_CHARS, SPEED_LIMITS, as_number, as_seed, as_text
from voicelab.errors import VoiceLabError
from voicelab.owners import Login
from voicelab.studio import GenerationRequest, PreparedGeneration, PromptClip, Queued, Take
from voicelab.subtitles import cues, to_srt
from voicelab.voices import SavedVoice, VoiceNotFoundError

log = logging.getLogger(__name__)

Event = Queued | JobProgress | ChunkReady | Take
OUTCOME_BY_STATUS = {400: "invalid", 404: "not_found", 413: "too_large", 429: "busy", 503: "unavailable"}


class VoiceId(BaseModel):
    id: str = Field(description="A saved voice's id (voice_...).")


class SpeechBody(BaseModel):
    """OpenAI's speech request, plus VoiceLab's ``language`` and ``seed``."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field("voicelab", description="Accepted for compatibility; the loaded backend speaks.")
    input: str = Field(description="The text to speak (at most the server's max_text_chars).")
    voice: str | VoiceId = Field("default", description='"default", a saved voice name or id, or {"id": ...}.')
    instructions: str = Field("", description='How to say it, e.g. "slowly, in a warm low voice".')
    response_format: Literal["wav", "pcm", "opus", "flac", "mp3", "srt"] = "mp3"
    speed: float = Field(1.0, ge=0.25, le=4.0)
    stream_format: Literal["audio", "sse"] = "audio"
    language: str = Field("auto", description='"auto" or a language code of the loaded voice.')
    seed: int | None = Field(None, description="Fixed seed for a repeatable take (echoed in X-Seed).")

    @field_validator("speed", mode="before")
    @classmethod
    def _speed(cls, value: object) -> float:
        """null is the default speed, as for every other control."""
        return 1.0 if value is None else api_field(lambda name, v: as_number("Speed", v, SPEED_LIMITS), "speed", value)

    @field_validator("seed", mode="before")
    @classmethod
    def _seed(cls, value: object) -> int | None:
        return api_field(lambda name, v: as_seed(v), "seed", value)

    @field_validator("instructions", mode="before")
    @classmethod
    def _instructions(cls, value: object) -> str:
        return api_field(lambda name, v: as_text(name, v, MAX_FIELD_CHARS), "instructions", value)


def outcome_of(exc: Exception) -> str:
    code = exc.code if isinstance(exc, ApiError) else status_of(exc).code if isinstance(exc, VoiceLabError) else 500
    return OUTCOME_BY_STATUS.get(code, "error")


def _prompt(ctx: ApiContext, voice: str | VoiceId, caller: Login) -> PromptClip | None:
    """The caller's saved voice by name or id (an admin's own first, then anyone's); another login's is missing."""
    if isinstance(voice, str) and voice.strip().lower() == "default":
        return None
    try:
        if caller.admin:
            with contextlib.suppress(VoiceNotFoundError):
                saved = _saved(ctx, voice, caller.name)
                return PromptClip(saved.clip_path, saved.transcript, saved)
        saved = _saved(ctx, voice, caller.viewer)
    except VoiceNotFoundError as exc:
        names = ", ".join(repr(v.name) for v in ctx.voices.list(caller.viewer)[:20]) or "none saved yet"
        raise VoiceNotFoundError(
            f"{str(exc).rstrip('.')}; use 'default' for the built-in voice, or a saved voice ({names})."
        ) from exc
    return PromptClip(saved.clip_path, saved.transcript, saved)


def _saved(ctx: ApiContext, voice: str | VoiceId, owner: str | None) -> SavedVoice:
    """``{"id": ...}`` by id only; a string by name or id."""
    return ctx.voices.get(voice.id.strip(), owner) if isinstance(voice, VoiceId) else ctx.voices.find(voice, owner)


def _request(ctx: ApiContext, body: SpeechBody, caller: Login) -> GenerationRequest:
    limit = ctx.settings.max_text_chars
    if len(body.input) > limit:
        raise ApiError(
            413,
            f"The input is {len(body.input):,} characters long (the limit is {limit:,}); "
            "please shorten it or split it up.",
            "invalid_request_error",
            "input",
        )
    if body.response_format == "srt" and body.stream_format == "sse":
        raise ApiError(
            400, "Subtitles (srt) come whole; use stream_format audio.", "invalid_request_error", "stream_format"
        )
    return GenerationRequest(
        text=body.input,
        kind="api",
        language=body.language,
        prompt=_prompt(ctx, body.voice, caller),
        instruction=body.instructions,
        speed=body.speed,
        seed=body.seed if body.seed is not None else secrets.randbelow(2**31),
        owner=caller.name,
    )


def _start(ctx: ApiContext, body: SpeechBody, caller: Login) -> tuple[PreparedGeneration, Event, Iterator[Event]]:
    """Validate, submit and wait for the first event: every refusal is raised here, before any byte is sent. The
    first event is the first chunk, except with ``stream_format`` sse, where a place in the queue or a voice fit's
    step comes first as an event of its own (so what fails after one comes as an ``error`` event)."""
    ctx.require_ready()
    prepared = ctx.service.prepare(_request(ctx, body, caller))
    events: Iterator[Event] = (
        ctx.service.follow(prepared) if body.stream_format == "sse" else ctx.service.stream(prepared)
    )
    return prepared, next(events), events


def _progress(event: Queued | JobProgress) -> dict[str, object]:
    """VoiceLab's own SSE events before the audio (OpenAI's clients skip types they do not know)."""
    if isinstance(event, Queued):
        return {"type": "voicelab.queued", "ahead": event.ahead, "waited_s": round(event.waited_s, 1),
                "waiting_for_worker": event.no_worker}  # fmt: skip
    return {"type": "voicelab.progress", "stage": event.stage, "step": event.step, "total": event.total,
            "message": event.line()}  # fmt: skip


def _audio_body(ctx: ApiContext, fmt: str, first: ChunkReady, events: Iterator[Event], began: float) -> Iterator[bytes]:
    encoder = StreamEncoder(fmt, first.chunk.sample_rate)
    try:
        yield encoder.feed(first.chunk.audio)
        for event in events:
            if isinstance(event, ChunkReady):
                yield encoder.feed(event.chunk.audio)
            elif isinstance(event, Take):
                yield encoder.close()
                ctx.metrics.finished("ok", time.monotonic() - began, event.result)
    except VoiceLabError as exc:  # the status line is gone: the body simply ends short, and the log says why
        log.warning("speech stream ended early: %s", exc)
        ctx.metrics.finished(outcome_of(exc), time.monotonic() - began)


def _sse_body(
    ctx: ApiContext, fmt: str, sample_rate: int, events: Iterator[Event], began: float, chars: int
) -> Iterator[bytes]:
    encoder = StreamEncoder(fmt, sample_rate)

    def delta(data: bytes) -> bytes:
        return format_sse_event(
            data_str=json.dumps({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()})
        )

    try:
        for event in events:
            if isinstance(event, ChunkReady):
                yield delta(encoder.feed(event.chunk.audio))
                continue
            if isinstance(event, (Queued, JobProgress)):
                yield format_sse_event(data_str=json.dumps(_progress(event)))
                continue
            yield delta(encoder.close())
            usage = {"input_tokens": chars, "output_tokens": 0, "total_tokens": chars}
            # OpenAI's done event, plus the take's figures (similarity to the prompt by the ECAPA judge, seed, ...)
            done = {"type": "speech.audio.done", "usage": usage, "voicelab": event.result.metrics()}
            yield format_sse_event(data_str=json.dumps(done, ensure_ascii=False))
            ctx.metrics.finished("ok", time.monotonic() - began, event.result)
    except VoiceLabError as exc:
        status = status_of(exc)
        error = {"message": str(exc), "type": status.kind, "param": None, "code": type(exc).__name__}
        yield format_sse_event(data_str=json.dumps({"type": "error", "error": error}))
        ctx.metrics.finished(outcome_of(exc), time.monotonic() - began)


def _subtitles(prepared: PreparedGeneration, events: Iterator[Event]) -> Response:
    pieces = [(e.chunk.text, e.chunk.duration_s) for e in events if isinstance(e, ChunkReady)]
    text = to_srt(cues(pieces, prepared.requests[0].sentence_silence_s))
    return PlainTextResponse(text, media_type="application/x-subrip")


def routes(ctx: ApiContext, auth: Depends) -> APIRouter:
    router = APIRouter(tags=["speech"], dependencies=[auth])

    @router.post(
        "/v1/audio/speech",
        response_class=Response,
        responses={200: {"content": {f.media_type: {} for f in FORMATS.values()}, "description": "The audio."}},
    )
    def speech(body: SpeechBody, caller: Caller) -> Response:
        """Speech in OpenAI's shape; streamed as sentences are ready (``stream_format`` audio or sse). Saved in the
        key's login's History, in one of its saved voices."""
        began = time.monotonic()
        try:
            prepared, first, events = _start(ctx, body, caller)
            if body.response_format == "srt":
                response = _subtitles(prepared, itertools.chain([first], events))
                ctx.metrics.finished("ok", time.monotonic() - began)
                return response
        except (VoiceLabError, ApiError) as exc:
            ctx.metrics.finished(outcome_of(exc), time.monotonic() - began)
            raise
        request = prepared.requests[0]
        fmt = body.response_format
        rate = first.chunk.sample_rate if isinstance(first, ChunkReady) else ctx.service.capabilities().sample_rate
        headers = {
            "X-Seed": str(request.seed),
            "X-Job-Id": request.job_id,
            "X-Sample-Rate": str(output_rate(fmt, rate)),
        }
        if body.stream_format == "sse":
            stream = _sse_body(ctx, fmt, rate, itertools.chain([first], events), began, len(body.input))
            return EventSourceResponse(stream, headers=headers)
        assert isinstance(first, ChunkReady), "without sse a job's first event is its first chunk"
        return StreamingResponse(
            _audio_body(ctx, fmt, first, events, began), media_type=FORMATS[fmt].media_type, headers=headers
        )

    return router
