"""The files the studio serves and the files a request may name, wherever the outputs folder lies.

Gradio names a file by its path on the server, and a client fetches it from ``/gradio_api/file=<path>``. VoiceLab
never shows a server path, and a path outside the working directory cannot be written relative to it in a URL
(``gradio_client`` builds the URL from the path, and the ``..`` segments fold away: a 404 for any
``--outputs-dir /data/voicelab``). So every file value names its file by a **served name** instead: ``outputs/``
and the file's place in the outputs folder (``outputs/.gradio/uploads/<hash>/<id>.wav``), or ``uploads/`` and its
place in Gradio's upload folder where that folder is a private one (an outputs folder that cannot be written).
:class:`ServedNamesMiddleware` reads ``/gradio_api/file=<served name>`` as the server path it stands for before
Gradio routes the request, so Gradio's own checks still decide what is served (only those folders).

With ``--auth`` a file is served only to the login it belongs to: the middleware asks :meth:`FileAdmission.may_fetch`
(its uploads and the results it was answered with, ``voicelab.ui.owned``; the History entries it sees) and answers
anything else 404 before Gradio reads it; it records each upload as the uploader's.

A request names files too (a voice prompt as ``{"path": ..., "meta": {"_type": "gradio.FileData"}}``).
:class:`FileAdmission` admits only what this server received (its upload folder: with ``--auth``, only this login's
uploads and results), the History entries the login may see and its saved voices, before Gradio reads or copies
anything.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from gradio.utils import get_upload_folder
from gradio_client.utils import is_file_obj, is_http_url_like, traverse
from starlette.responses import JSONResponse

from voicelab.errors import VoiceLabError
from voicelab.history import History
from voicelab.owners import login_named
from voicelab.ui.owned import OwnedFiles, login_in
from voicelab.voices import VoiceStore

log = logging.getLogger(__name__)

OUTPUTS_NAME = "outputs"  # the outputs folder in every file value and URL, whatever it is called and wherever it is
UPLOADS_NAME = "uploads"  # Gradio's upload folder, only where it is not inside the outputs folder
FILE_ROUTE = "/gradio_api/file="
FILE_ROUTES = (FILE_ROUTE, "/gradio_api/file/")  # Gradio's file route, and its older spelling
UPLOAD_ROUTE = "/gradio_api/upload"
NOT_YOURS = "This login has no such file."
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
    route as server paths; with ``--auth``, only the login a file belongs to gets it, and each upload is recorded as
    its uploader's (the policy is the app's ``GuardedBlocks.intake``)."""

    def __init__(self, app: ASGIApp, names: ServedNames) -> None:
        self.app, self.names = app, names

    async def __call__(
        self, scope: Scope, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]
    ) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        scope = self.names.rewrite(scope)
        intake, login = _intake_of(scope), login_in(scope)
        if intake is None or not intake.owned.enabled or not login:  # no --auth, or Gradio answers the login
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        asked = file_asked(path)
        if asked is not None and not intake.may_fetch(asked, login):
            log.info("refused %s a file it does not own", login)
            await JSONResponse({"error": NOT_YOURS, "detail": NOT_YOURS}, status_code=404)(scope, receive, send)
            return
        if path.endswith(UPLOAD_ROUTE) and scope.get("method") == "POST":
            send = _recording_uploads(send, intake.owned, login)
        await self.app(scope, receive, send)


def file_asked(path: str) -> str | None:
    """What a request to Gradio's file route asks for, as that route reads it (the first route marker in the path),
    or ``None`` for any other request."""
    hits = [(path.find(route), route) for route in FILE_ROUTES if route in path]
    if not hits:
        return None
    at, route = min(hits)
    return path[at + len(route) :]


def _intake_of(scope: Scope) -> FileAdmission | None:
    app = scope.get("app")
    blocks = getattr(app, "blocks", None)
    intake = getattr(blocks, "intake", None)
    return intake if isinstance(intake, FileAdmission) else None


def _recording_uploads(
    send: Callable[[Any], Awaitable[None]], owned: OwnedFiles, login: str
) -> Callable[[Any], Awaitable[None]]:
    """``send`` that records the paths of a successful upload answer as ``login``'s before the answer's end leaves."""
    status, body = [0], bytearray()

    async def recording(message: Any) -> None:
        if message["type"] == "http.response.start":
            status[0] = int(message["status"])
        elif message["type"] == "http.response.body" and status[0] == 200:
            body.extend(message.get("body", b""))
            if not message.get("more_body"):
                try:
                    paths = json.loads(bytes(body))
                except ValueError:
                    paths = []
                for path in paths if isinstance(paths, list) else []:
                    if isinstance(path, str):
                        owned.add(path, login)
        await send(message)

    return recording


class NotAdmitted(Exception):
    """A file value names a file this request may not read (the caller words the refusal for its input)."""


class FileAdmission:
    """Which files a request may name (``admit``: the value with server paths, or ``NotAdmitted``) and which ones the
    file route may serve (``may_fetch``), for a login ("" without ``--auth``)."""

    def __init__(
        self,
        names: ServedNames,
        history: History | None = None,
        voices: VoiceStore | None = None,
        admins: frozenset[str] = frozenset(),
        owned: OwnedFiles | None = None,
    ) -> None:
        self.names, self.history, self.voices, self.admins = names, history, voices, admins
        self.owned = owned or OwnedFiles(enabled=False)

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
        """In the upload folder (with ``--auth``: this login's upload or result), or a History entry's audio this
        login sees, or a saved voice's clip this login sees."""
        real = path.resolve()
        if real.is_relative_to(Path(get_upload_folder()).resolve()):
            return not self.owned.enabled or self._owns(real, login)
        return self._stored(real, login, clips=True)

    def may_fetch(self, asked: str, login: str) -> bool:
        """What the file route may send this login (with ``--auth``): its uploads and results in the upload folder,
        the History entries (audio and sidecar) it sees; never a URL, a saved voice's folder or anything else."""
        if is_http_url_like(asked):
            return False
        real = Path(os.path.abspath(asked)).resolve()
        if real.is_relative_to(Path(get_upload_folder()).resolve()):
            return self._owns(real, login)
        return self._stored(real, login, clips=False)

    def _owns(self, real: Path, login: str) -> bool:
        return login_named(login, self.admins).sees_all or self.owned.owns(real, login)

    def _stored(self, real: Path, login: str, clips: bool) -> bool:
        """A History entry's audio (and, when fetched, its sidecar) or a saved voice's clip, that ``login`` sees."""
        viewer = login_named(login, self.admins).viewer
        try:
            if self.history is not None and real.parent == self.history.root.resolve():
                audio = self.history.get(real.stem, viewer).audio_path.resolve()
                return real == audio or (not clips and real == audio.with_suffix(".json"))
            if clips and self.voices is not None and real.parent == self.voices.root.resolve():
                return self.voices.get(real.stem, viewer).clip_path.resolve() == real
        except VoiceLabError:
            return False
        return False
