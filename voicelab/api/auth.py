"""The API key: with ``--auth user:password`` every /v1 route and /metrics need the password as a key,
sent as ``Authorization: Bearer <password>`` (what the OpenAI clients send as their ``api_key``) or
``X-API-Key: <password>``. Without ``--auth`` the API is open, like the UI.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from fastapi import Depends, HTTPException
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from voicelab.settings import Settings
from voicelab.ui.serving import parse_auth

BEARER = HTTPBearer(auto_error=False, description="The password of --auth user:password.")
API_KEY = APIKeyHeader(name="X-API-Key", auto_error=False, description="The password of --auth user:password.")


def api_key_check(settings: Settings) -> Callable[..., None]:
    """A FastAPI dependency refusing a missing or wrong key with 401 (in the API's error shape)."""
    logins = parse_auth(settings.auth)
    keys = [password.encode() for _, password in logins or []]

    def check(
        bearer: HTTPAuthorizationCredentials | None = Depends(BEARER),  # noqa: B008 (FastAPI's idiom)
        key: str | None = Depends(API_KEY),
    ) -> None:
        if not keys:
            return
        given = (bearer.credentials if bearer is not None else key or "").encode()
        if not any([secrets.compare_digest(given, expected) for expected in keys]):
            raise HTTPException(
                401,
                "This server needs an API key: send Authorization: Bearer <password> or X-API-Key: <password>.",
                headers={"WWW-Authenticate": "Bearer"},
            )

    return check
