"""Saved voices over HTTP: ``POST/GET /v1/audio/voices``, ``GET/DELETE /v1/audio/voices/{id}``.

A thin adapter over ``voicelab.voices.VoiceStore`` (the UI's "My voices" uses the same store). Uploads are
refused with 413 past ``max_upload_mb`` before intake decodes anything. With ``--auth`` a key lists, fetches, uses
and deletes only its login's voices (an admin's: everyone's); another login's voice is a 404, like one never saved.
An id no route takes (``/v1/audio/voices/a/b``, an encoded ``../``) is the same 404.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Annotated, Any, Literal

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.params import Depends
from pydantic import BaseModel
from starlette.routing import Match

from voicelab.api.auth import Caller
from voicelab.api.context import ApiContext
from voicelab.api.errors import ApiError
from voicelab.voice.prompt import PROMPT_RULE
from voicelab.voices import SavedVoice, VoiceNotFoundError

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


class VoiceObject(BaseModel):
    object: Literal["audio.voice"] = "audio.voice"
    id: str
    name: str
    created_at: int
    transcript: str = ""
    duration_s: float = 0.0


class VoiceList(BaseModel):
    object: Literal["list"] = "list"
    data: list[VoiceObject]


class VoiceDeleted(BaseModel):
    object: Literal["audio.voice.deleted"] = "audio.voice.deleted"
    id: str
    deleted: bool = True


def voice_object(voice: SavedVoice) -> VoiceObject:
    return VoiceObject(
        id=voice.voice_id,
        name=voice.name,
        created_at=voice.created_at,
        transcript=voice.transcript,
        duration_s=voice.duration_s,
    )


def _read_limited(upload: UploadFile, limit: int) -> bytes:
    """The upload's bytes, or 413 as soon as it is known to be larger than ``limit``."""
    too_large = ApiError(
        413,
        f"The audio sample is larger than {limit / 2**20:.3g} MB; please upload a shorter clip.",
        "invalid_request_error",
        "audio_sample",
    )
    if upload.size is not None and upload.size > limit:
        raise too_large
    data = upload.file.read(limit + 1)
    if len(data) > limit:
        raise too_large
    return data


def routes(ctx: ApiContext, auth: Depends) -> APIRouter:
    router = APIRouter(tags=["voices"], dependencies=[auth])
    limit = ctx.settings.max_upload_mb * 2**20

    @router.post("/v1/audio/voices", response_model=VoiceObject, status_code=201)
    def create_voice(
        caller: Caller,
        name: Annotated[str, Form(description="What to call the voice (unique among yours).")],
        audio_sample: Annotated[UploadFile, File(description=f"{PROMPT_RULE} (WAV/FLAC/OGG/MP3).")],
        transcript: Annotated[str, Form(description="What the clip says (helps neural cloning).")] = "",
    ) -> Any:
        """Save a voice from a clip, as the key's login's; it is checked like a Clone prompt (length, silence)."""
        data = _read_limited(audio_sample, limit)
        suffix = PurePath(audio_sample.filename or "clip.wav").suffix or ".wav"
        return voice_object(ctx.voices.save(name, data, transcript, suffix, caller.name))

    @router.get("/v1/audio/voices", response_model=VoiceList)
    def list_voices(caller: Caller) -> Any:
        return VoiceList(data=[voice_object(v) for v in ctx.voices.list(caller.viewer)])

    @router.get("/v1/audio/voices/{voice_id}", response_model=VoiceObject)
    def get_voice(voice_id: str, caller: Caller) -> Any:
        return voice_object(ctx.voices.get(voice_id, caller.viewer))

    @router.delete("/v1/audio/voices/{voice_id}", response_model=VoiceDeleted)
    def delete_voice(voice_id: str, caller: Caller) -> Any:
        return VoiceDeleted(id=ctx.voices.delete(voice_id, caller.viewer).voice_id)

    return router


def fallback_routes(auth: Depends) -> APIRouter:
    """Last of the API's routes: whatever else reaches ``/v1`` answers in the API's error shape (Gradio, mounted at
    ``/``, would answer ``{"detail": "Not Found"}``); a known route asked with another method is a 405."""
    router = APIRouter(dependencies=[auth], include_in_schema=False)

    @router.api_route("/v1/audio/voices/{rest:path}", methods=list(METHODS))
    def no_such_voice(rest: str, request: Request) -> Any:
        _refuse_other_method(request)
        raise VoiceNotFoundError(f"There is no saved voice with the id {rest[:80]!r}.")

    @router.api_route("/v1/{rest:path}", methods=list(METHODS))
    def no_such_route(rest: str, request: Request) -> Any:
        _refuse_other_method(request)
        raise ApiError(404, f"There is no API route /v1/{rest[:80]}; GET /docs lists them.", "not_found_error")

    return router


def _refuse_other_method(request: Request) -> None:
    """A 405 naming the methods a route takes where only the method was wrong (those routes match partly)."""
    scope = request.scope
    partly = [r for r in request.app.router.routes if r.matches(scope)[0] == Match.PARTIAL]
    allowed = [m for m in METHODS if any(r.matches({**scope, "method": m})[0] == Match.FULL for r in partly)]
    if allowed:
        path = request.url.path
        raise ApiError(405, f"{path} takes {', '.join(allowed)}, not {request.method}.", "invalid_request_error")
