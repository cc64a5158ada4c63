"""Which login each file in Gradio's upload folder belongs to, and who is asking for one.

Gradio's upload folder holds two kinds of files: the uploads it received (``POST /gradio_api/upload``) and the copies
it made of the files it answered with (a take, its subtitles, a History entry played, a saved voice picked). With
``--auth``, :class:`OwnedFiles` remembers the login behind each: the uploader, or the login the answer went to (two
logins that sent or got the same bytes under the same name share the file, which Gradio names by its content). The
record lives in memory: after a restart, earlier uploads and cached results belong to no one, and the page lists and
plays History again from the folder. Without ``--auth`` nothing is recorded and nothing is refused.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from starlette.requests import HTTPConnection

MAX_FILES = 100_000  # past this, the files no longer on disk are forgotten first, then the oldest

Scope = MutableMapping[str, Any]


class OwnedFiles:
    """Server paths (resolved) → the logins they belong to; safe to use from the server's threads."""

    def __init__(self, enabled: bool, capacity: int = MAX_FILES) -> None:
        self.enabled, self.capacity = enabled, capacity
        self._owners: OrderedDict[Path, frozenset[str]] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, path: str | os.PathLike[str], login: str) -> None:
        """``path`` belongs to ``login`` (too); nothing without ``--auth`` or without a login."""
        if not self.enabled or not login:
            return
        key = _key(path)
        with self._lock:
            self._owners[key] = self._owners.get(key, frozenset()) | {login}
            self._owners.move_to_end(key)
            if len(self._owners) > self.capacity:
                self._forget()

    def owns(self, path: str | os.PathLike[str], login: str) -> bool:
        with self._lock:
            return login in self._owners.get(_key(path), frozenset())

    def _forget(self) -> None:
        for gone in [path for path in self._owners if not path.exists()]:
            del self._owners[gone]
        while len(self._owners) > self.capacity:
            self._owners.popitem(last=False)


def _key(path: str | os.PathLike[str]) -> Path:
    with contextlib.suppress(OSError):
        return Path(path).resolve()
    return Path(os.path.abspath(path))


def login_in(scope: Scope) -> str | None:
    """The login of an HTTP request to Gradio's app, read as Gradio's own ``/user`` route reads it (its login
    cookie); ``""`` when the studio has no ``--auth``, ``None`` when nobody is logged in."""
    app = scope.get("app")
    if getattr(app, "auth", None) is None:
        return ""
    cookie_id = getattr(app, "cookie_id", "")
    cookies = HTTPConnection(scope).cookies
    token = cookies.get(f"access-token-{cookie_id}") or cookies.get(f"access-token-unsecure-{cookie_id}")
    user = getattr(app, "tokens", {}).get(token)
    return user if isinstance(user, str) and user else None
