"""The files the studio serves and the files a request may name, wherever the outputs folder lies.

Gradio names a file by its path on the server, and a client fetches it from ``/gradio_api/file=<path>``. VoiceLab
never shows a server path, and a path outside the working directory cannot be written relative to it in a URL
(``gradio_client`` builds the URL from the path, and the ``..`` segments fold away: a 404 for any
``--outputs-dir /data/voicelab``). So every file value names its file by a **served name** instead: ``outputs/``
and the file's place in the outputs folder (``outputs/.gradio/uploads/<hash>/<id>.wav``), or ``uploads/`` and its
place in Gradio's upload folder where that folder is a private one (an outputs folder that cannot be written).
:class:`ServedNamesMiddleware` reads ``/gradio_api/file=<served name>`` as the server path it stands for before
Gradio routes the request, so Gradio's own checks still decide what is served (only those folders).

A request names files too (a voice prompt as ``{"path": ..., "meta": {"_type": "gradio.FileData"}}``).
:class:`FileAdmission` admits only what this server received (its upload folder: uploads, and the copies it
served), the History entries the login may see and the saved voices, before Gradio reads or copies anything.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from gradio.utils import get_upload_folder
from gradio_client.utils import is_file_obj, is_http_url_like, traverse

from voicelab.errors import VoiceLabError
from voicelab.history import History
from voicelab.voices import VoiceStore

OUTPUTS_NAME = "outputs"  # the outputs folder in every file value and URL, whatever it is called and wherever it is
UPLOADS_NAME = "uploads"  # Gradio's upload folder, only where it is not inside the outputs folder
FILE_ROUTE = "/gradio_api/file="
Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


class ServedNames:
    """Served names and the server paths they stand for (stateless: every instance for one folder agrees)."""

    def __init__(self, outputs: str | os.PathLike[str]) -> None:
        self.outputs = Path(os.path.abspath(outputs))

    def roots(self) -> list[tuple[str, Path]]:
        """(name, folder) of each served folder; Gradio's upload folder is read as Gradio reads it."""
        uploads = Path(os.path.abspath(get_upload_folder()))
        roots = [(OUTPUTS_NAME, self.outputs)]
        if not uploads.is_relative_to(self.outputs):
            roots.append((UPLOADS_NAME, uploads))
        return roots

    def name_of(self, path: str | os.PathLike[str]) -> str | None:
        """The served name of a server path; ``None`` outside the served folders."""
        absolute = Path(os.path.abspath(path))
        for name, root in self.roots():
            if absolute.is_relative_to(root):
                rest = absolute.relative_to(root).as_posix()
                return name if rest == "." else f"{name}/{rest}"
        return None

    def path_of(self, name: str) -> Path | None:
        """The server path a served name stands for; ``None`` for anything else (or a name that leaves its folder)."""
        head, _, rest = name.partition("/")
        for served, root in self.roots():
            if head == served:
                target = Path(os.path.normpath(root / rest))
                return target if target.is_relative_to(root) else None
        return None

    def server_path(self, value: str) -> Path:
        """A file value's path on the server: a served name, else the path as Gradio reads it (from the working
        directory)."""
        return self.path_of(value) or Path(os.path.abspath(value))

    def rewrite(self, scope: Scope) -> Scope:
        """An HTTP scope for ``/gradio_api/file=<served name>`` as one for the server path it stands for."""
        path = scope.get("path", "")
        at = path.find(FILE_ROUTE)
        target = self.path_of(path[at + len(FILE_ROUTE) :]) if at >= 0 else None
        if target is None:
            return scope
        path = path[: at + len(FILE_ROUTE)] + str(target)
        return {**scope, "path": path, "raw_path": urllib.parse.quote(path).encode("ascii")}

    def named(self, file: dict[str, Any]) -> dict[str, Any]:
        """A Gradio file value with ``path`` and the ``url`` made from it by served name (others unchanged)."""
        path = file.get("path")
        name = self.name_of(path) if isinstance(path, str) and os.path.isabs(path) else None
        if name is None:
            return file
        url = file.get("url")
        at = url.find("/file=") if isinstance(url, str) else -1
        if isinstance(url, str) and at >= 0:
            file = {**file, "url": url[: at + len("/file=")] + urllib.parse.quote(name, safe="/")}
        return {**file, "path": name}


class ServedNamesMiddleware:
    """ASGI middleware (through ``app_kwargs={"middleware": [...]}``): file URLs by served name reach Gradio's file
    route as server paths."""

    def __init__(self, app: ASGIApp, names: ServedNames) -> None:
        self.app, self.names = app, names

    async def __call__(
        self, scope: Scope, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]
    ) -> None:
        if scope.get("type") == "http":
            scope = self.names.rewrite(scope)
        await self.app(scope, receive, send)


class NotAdmitted(Exception):
    """A file value names a file this request may not read (the caller words the refusal for its input)."""


class FileAdmission:
    """Which files a request may name; ``admit`` returns the value with server paths, or raises ``NotAdmitted``."""

    def __init__(
        self,
        names: ServedNames,
        history: History | None = None,
        voices: VoiceStore | None = None,
        admins: frozenset[str] = frozenset(),
    ) -> None:
        self.names, self.history, self.voices, self.admins = names, history, voices, admins

    def admit(self, value: Any, login: str) -> Any:
        """``value`` with each file's path as the server path it names, once every one is admitted."""

        def checked(file: dict[str, Any]) -> dict[str, Any]:
            path = file["path"]
            if is_http_url_like(path):  # the server never fetches what a client names
                raise NotAdmitted(path)
            target = self.names.server_path(path)
            if not self.may_read(target, login):
                raise NotAdmitted(path)
            return {**file, "path": str(target)}

        return traverse(value, checked, is_file_obj)

    def may_read(self, path: Path, login: str) -> bool:
        """In the upload folder, or a History entry's audio this login sees, or a saved voice's clip."""
        real = path.resolve()
        if real.is_relative_to(Path(get_upload_folder()).resolve()):
            return True
        viewer = None if not login or login in self.admins else login
        try:
            if self.history is not None and real.parent == self.history.root.resolve() and real.suffix == ".wav":
                return self.history.get(real.stem, viewer).audio_path.resolve() == real
            if self.voices is not None and real.parent == self.voices.root.resolve():
                return self.voices.get(real.stem).clip_path.resolve() == real
        except VoiceLabError:
            return False
        return False
