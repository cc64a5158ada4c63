"""Saved voices over HTTP: ``POST/GET /v1/audio/voices``, ``GET/DELETE /v1/audio/voices/{id}``.

A thin adapter over ``voicelab.voices.VoiceStore`` (the UI's "My voices" uses the same store). Uploads are
refused with 413 past ``max_upload_mb`` before intake decodes anything.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Annotated, Any, Literal

from fastapi import APIRouter, File, Form, UploadFile
from fastapi.params import Depends
from pydantic import BaseModel

from voicelab.api.context import ApiContext
from voicelab.api.errors import ApiError
from voicelab.voice.prompt import PROMPT_RULE
from voicelab.voices import SavedVoice


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
        name: Annotated[str, Form(description="What to call the voice (unique, letters/digits/spaces).")],
        audio_sample: Annotated[UploadFile, File(description=f"{PROMPT_RULE} (WAV/FLAC/OGG/MP3).")],
        transcript: Annotated[str, Form(description="What the clip says (helps neural cloning).")] = "",
    ) -> Any:
        """Save a voice from a clip; it is checked like a Clone prompt (length, silence, format)."""
        data = _read_limited(audio_sample, limit)
        suffix = PurePath(audio_sample.filename or "clip.wav").suffix or ".wav"
        return voice_object(ctx.voices.save(name, data, transcript, suffix))

    @router.get("/v1/audio/voices", response_model=VoiceList)
    def list_voices() -> Any:
        return VoiceList(data=[voice_object(v) for v in ctx.voices.list()])

    @router.get("/v1/audio/voices/{voice_id}", response_model=VoiceObject)
    def get_voice(voice_id: str) -> Any:
        return voice_object(ctx.voices.get(voice_id))

    @router.delete("/v1/audio/voices/{voice_id}", response_model=VoiceDeleted)
    def delete_voice(voice_id: str) -> Any:
        return VoiceDeleted(id=ctx.voices.delete(voice_id).voice_id)

    return router
