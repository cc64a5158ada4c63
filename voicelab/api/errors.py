"""Every API error in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

A ``VoiceLabError`` keeps its sentence and gets its status from ``STATUS`` (a user's mistake is a 4xx, never a
500); FastAPI's own validation errors and HTTP exceptions are rewritten into the same shape.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from voicelab import errors
from voicelab.voices import VoiceNotFoundError

log = logging.getLogger(__name__)

RETRY_AFTER_S = 2
T = TypeVar("T")


@dataclass(frozen=True)
class Status:
    """How one error class answers: HTTP status, OpenAI error ``type`` and whether a Retry-After is sent."""

    code: int
    kind: str
    retry: bool = False
    param: str | None = None


STATUS: dict[type[errors.VoiceLabError], Status] = {
    errors.InvalidTextError: Status(400, "invalid_request_error", param="input"),
    errors.InvalidPromptError: Status(400, "invalid_request_error"),
    errors.InvalidSettingError: Status(400, "invalid_request_error"),
    VoiceNotFoundError: Status(404, "not_found_error", param="voice"),
    errors.EngineBusyError: Status(429, "rate_limit_error", retry=True),
    errors.BackendLoadError: Status(503, "service_unavailable", retry=True),
    errors.EngineStoppedError: Status(503, "service_unavailable", retry=True),
    errors.WorkerCrashedError: Status(503, "service_unavailable", retry=True),
    errors.DeviceOutOfMemoryError: Status(503, "service_unavailable", retry=True),
    errors.JobTimeoutError: Status(504, "timeout_error"),
    errors.StorageError: Status(500, "server_error"),
    errors.EngineChoiceError: Status(409, "invalid_request_error", param="backend"),
}


class ApiError(Exception):
    """An error raised by a route itself (a limit, an unready engine), already with its status."""

    def __init__(self, code: int, message: str, kind: str, param: str | None = None, retry: bool = False) -> None:
        super().__init__(message)
        self.code, self.message, self.kind, self.param, self.retry = code, message, kind, param, retry


def api_field(coerce: Callable[[str, object], T], name: str, value: object) -> T:
    """A pydantic ``before`` validator through the studio's own coercion (the same sentence as the UI's)."""
    try:
        return coerce(name, value)
    except errors.VoiceLabError as exc:
        raise ValueError(str(exc)) from exc


def status_of(exc: errors.VoiceLabError) -> Status:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return Status(500, "server_error")


def error_response(
    code: int, message: str, kind: str, param: str | None = None, retry: bool = False, error_code: str | None = None
) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": error_code}}
    headers = {"Retry-After": str(RETRY_AFTER_S)} if retry else None
    return JSONResponse(body, status_code=code, headers=headers)


def _param_of(loc: tuple[object, ...]) -> str | None:
    names = [str(part) for part in loc if part not in ("body", "query", "path", "header", "form")]
    return ".".join(names) or None


def install(app: FastAPI) -> None:
    """Register the handlers that give every error the one shape."""

    @app.exception_handler(errors.VoiceLabError)
    async def voicelab_error(request: Request, exc: errors.VoiceLabError) -> JSONResponse:
        status = status_of(exc)
        if status.code >= 500:
            log.warning("%s %s failed: %s", request.method, request.url.path, exc)
        return error_response(status.code, str(exc), status.kind, status.param, status.retry, type(exc).__name__)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.code, exc.message, exc.kind, exc.param, exc.retry)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "The request is not valid."}
        param = _param_of(tuple(first.get("loc", ())))
        message = str(first.get("msg", "The request is not valid."))
        sentence = f"{param}: {message}." if param else f"{message}."
        if message.startswith("Value error, "):  # the studio's own coercion (api_field): its sentence as it is
            sentence = message.removeprefix("Value error, ")
        return error_response(400, sentence.replace("..", "."), "invalid_request_error", param)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        kind = {401: "authentication_error", 404: "not_found_error", 405: "invalid_request_error"}.get(
            exc.status_code, "invalid_request_error" if exc.status_code < 500 else "server_error"
        )
        response = error_response(exc.status_code, str(exc.detail), kind)
        if exc.headers:
            response.headers.update(exc.headers)
        return response
