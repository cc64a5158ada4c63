"""API keys: with ``--auth``, every /v1 route and /metrics need a key of one of its logins, sent as
``Authorization: Bearer <key>`` (what the OpenAI clients send as their ``api_key``) or ``X-API-Key: <key>``.

Keys live hashed in the key file (``--api-keys``, ``voicelab.keys``; ``python -m voicelab keys add LOGIN`` makes
one) and each acts as its login on every route: its History, its saved voices. A password of ``--auth`` is never a
key. With ``--auth`` and no key yet, the API refuses every request with the sentence saying how to make one.
Without ``--auth`` the API is open, like the UI, and acts as the one user.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from voicelab.keys import ADD_COMMAND, ApiKeys
from voicelab.owners import Login, admins_of, login_named
from voicelab.settings import Settings
from voicelab.ui.serving import parse_auth

BEARER = HTTPBearer(auto_error=False, description="An API key of a login (python -m voicelab keys add LOGIN).")
API_KEY = APIKeyHeader(name="X-API-Key", auto_error=False, description="The same key, as a header of its own.")
NO_KEYS = f"This server has no API keys yet; create one with {ADD_COMMAND}."
NO_KEY = "This server needs an API key: send Authorization: Bearer <key> or X-API-Key: <key>."
WRONG_KEY = f"That API key is not valid here (revoked, or never made); {ADD_COMMAND} makes a new one."


def refused(sentence: str) -> HTTPException:
    return HTTPException(401, sentence, headers={"WWW-Authenticate": "Bearer"})


class KeyCheck:
    """The app's key rule (``app.state.key_check``): the login behind a key, or 401 in the API's error shape."""

    def __init__(self, settings: Settings, keys: ApiKeys | None = None) -> None:
        self.logins = {user for user, _ in parse_auth(settings.auth) or []}
        self.admins = admins_of(settings)
        self.keys = keys or ApiKeys(settings.api_keys_path)

    def login_for(self, given: str) -> Login:
        if not self.logins:
            return Login()
        if not self.keys.records():
            raise refused(NO_KEYS)
        if not given:
            raise refused(NO_KEY)
        login = self.keys.login_for(given)
        if login is None or login not in self.logins:
            raise refused(WRONG_KEY)
        return login_named(login, self.admins)


def current_login(
    request: Request,
    bearer: HTTPAuthorizationCredentials | None = Depends(BEARER),  # noqa: B008 (FastAPI's idiom)
    key: str | None = Depends(API_KEY),
) -> Login:
    """The FastAPI dependency of every route behind the key (run once per request, however often it is named)."""
    check: KeyCheck = request.app.state.key_check
    return check.login_for(bearer.credentials if bearer is not None else key or "")


Caller = Annotated[Login, Depends(current_login)]  # a route's ``caller: Caller``: the login its key acts as
