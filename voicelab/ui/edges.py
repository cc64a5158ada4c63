"""The studio's edge: whatever reaches a Gradio endpoint is answered in one sentence, never a Python error.

Every named endpoint is wired with ``preprocess=False``, so the handlers receive the raw JSON values and
coerce them through the one validator (``voicelab.engine.validation``'s ``as_*`` functions, which the HTTP API
uses too). What can still fail before a handler runs is Gradio's own intake: too few values, or a file value
that is not an upload of this server. :class:`GuardedBlocks` turns those into a ``gr.Error`` with one sentence
(and no traceback in the log). Gradio's HTTP routes raise for an unknown endpoint name or an upload part
without a file, and FastAPI refuses a malformed body (422, a list of pydantic errors); :func:`gradio_error_handlers`
are FastAPI exception handlers, passed through the documented ``app_kwargs`` of ``launch`` / ``mount_gradio_app``,
that answer those with a 4xx and one sentence.

Before any of that, each file a request names passes :class:`voicelab.ui.served.FileAdmission` (only what this
server received, and the History and saved voices the login may see), so Gradio never reads or copies another file;
outputs name their files by served name (``outputs/...``), never by the server's path, and with ``--auth`` each
file an answer carries is recorded as the answered login's (``voicelab.ui.owned``), the only login it is served to.
"""

from __future__ import annotations

import collections
import functools
import inspect
import logging
import re
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

import gradio as gr
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from gradio.route_utils import FnIndexInferError
from gradio_client.utils import is_file_obj_with_meta, traverse

from voicelab.engine.validation import as_seed
from voicelab.errors import InvalidPromptError, VoiceLabError
from voicelab.ui.i18n import english
from voicelab.ui.served import FileAdmission, NotAdmitted

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")
FILE_COMPONENTS = (gr.Audio, gr.File)
Handler = Callable[[Request, Exception], Coroutine[Any, Any, JSONResponse]]


def shows_errors(handler: Callable[P, R]) -> Callable[P, R]:
    """Show a VoiceLabError as a Gradio error popup carrying exactly its sentence (generators too)."""
    if inspect.isgeneratorfunction(handler):

        @functools.wraps(handler)
        def stream(*args: P.args, **kwargs: P.kwargs) -> Any:
            try:
                yield from handler(*args, **kwargs)  # type: ignore[misc]
            except VoiceLabError as exc:
                log.info("shown to the user: %s", exc)
                raise gr.Error(str(exc), print_exception=False) from exc
            except (gr.Error, GeneratorExit):
                raise
            except Exception as exc:
                raise unexpected(handler, exc) from exc

        return stream  # type: ignore[return-value]

    @functools.wraps(handler)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return handler(*args, **kwargs)
        except VoiceLabError as exc:
            log.info("shown to the user: %s", exc)
            raise gr.Error(str(exc), print_exception=False) from exc
        except gr.Error:
            raise
        except Exception as exc:
            raise unexpected(handler, exc) from exc

    return wrapper


def api_answer(handler: Callable[..., Any], keep: tuple[int, ...]) -> Callable[..., tuple[Any, ...]]:
    """A page's handler as a named endpoint for API clients: one answer (a streaming handler's last outputs), the
    outputs at ``keep`` in that order, each a plain value (a player's ``gr.update`` as its value), with the handler's
    own parameters (Gradio and the refusals read them from its signature)."""

    @functools.wraps(handler)
    def endpoint(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
        answer = handler(*args, **kwargs)
        if inspect.isgenerator(answer):
            [answer] = collections.deque(answer, maxlen=1)  # the take, after the chunks
        return tuple(plain(answer[index]) for index in keep)

    return endpoint


def plain(value: Any) -> Any:
    """An output as an API client wants it: an update's value (a hidden player's is null), anything else as it is."""
    if isinstance(value, dict) and value.get("__type__") == "update":
        return value.get("value")
    return value


def unexpected(handler: Callable[..., Any], exc: Exception) -> gr.Error:
    """A fault of ours: logged with its traceback for us, one sentence for the user."""
    log.exception("%s failed unexpectedly", getattr(handler, "__qualname__", handler))
    return gr.Error("Something went wrong inside VoiceLab; the server log says what.", print_exception=False)


def seed_for(value: object) -> int | None:
    """The seed box: blank or negative means a fresh random seed (shown afterwards)."""
    return as_seed(value)


def login_of(request: gr.Request | None) -> str:
    """The logged-in user behind a call ("" without ``--auth``)."""
    name = getattr(request, "username", None) if request is not None else None
    return name if isinstance(name, str) else ""


def upload_path(label: str, value: object) -> str | None:
    """A file input as the handler gets it: Gradio's file dict (``preprocess=False``), a path, or nothing."""
    if isinstance(value, dict):
        value = value.get("path")
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidPromptError(f"{label} must be an uploaded audio file.")
    return value


def parameter_names(fn: Callable[..., Any] | None) -> list[str]:
    """The names a client sees for an endpoint's inputs (Gradio reads them from the handler's signature)."""
    if fn is None:
        return []
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.annotation not in (gr.Request, "gr.Request") and p.name != "request"]


def with_defaults(block_fn: Any, inputs: list[Any]) -> list[Any]:
    """Missing trailing values become null where the handler has a default for them (the handler decides)."""
    wanted = len(block_fn.inputs)
    if len(inputs) >= wanted or block_fn.fn is None:
        return inputs
    try:
        params = [p for p in inspect.signature(block_fn.fn).parameters.values() if p.name != "request"]
    except (TypeError, ValueError):
        return inputs
    missing = params[len(inputs) : wanted]
    if len(missing) == wanted - len(inputs) and all(p.default is not inspect.Parameter.empty for p in missing):
        return inputs + [None] * len(missing)
    return inputs


def label_words(component: Any) -> str:
    """A component's label as the words a sentence starts with: "Voice prompt: 1 to 30 s…" → "The voice prompt"."""
    words = re.split(r"[:(]", english(getattr(component, "label", None)), maxsplit=1)[0].strip()
    return f"The {words[0].lower()}{words[1:]}" if words else "The file"


def file_refusal(block_fn: Any, component: Any) -> str:
    """The one sentence for a file value this server cannot take (``component`` is the input it came in)."""
    if isinstance(component, FILE_COMPONENTS):
        where = "uploaded to this server first (POST /gradio_api/upload)"
        return f"{label_words(component)} must be a file {where}, or null."
    name = f"/{block_fn.api_name}" if block_fn.api_name else "This action"
    return f"{name} could not read the values it was sent."


def intake_refusal(block_fn: Any, inputs: list[Any]) -> str:
    """The one sentence for a request Gradio could not take in (``block_fn`` is Gradio's ``BlockFunction``)."""
    name = f"/{block_fn.api_name}" if block_fn.api_name else "This action"
    wanted = list(block_fn.inputs)
    if len(inputs) < len(wanted):
        names = parameter_names(block_fn.fn)[: len(wanted)]
        listed = f" ({', '.join(names)})" if len(names) == len(wanted) else ""
        return f"{name} takes {len(wanted)} values{listed}; {len(inputs)} were sent."
    files = [c for c in wanted if isinstance(c, FILE_COMPONENTS)]
    return file_refusal(block_fn, files[0] if files else None)


class GuardedBlocks(gr.Blocks):
    """``gr.Blocks`` whose input intake fails with one sentence instead of Gradio's multi-line report.

    ``intake`` (set by ``build_ui``) admits the files a request names and names the files of its answers."""

    intake: FileAdmission | None = None

    async def process_api(
        self,
        block_fn: Any,
        inputs: list[Any],
        state: Any = None,
        request: Any = None,
        iterator: Any = None,
        session_hash: str | None = None,
        event_id: str | None = None,
        event_data: Any = None,
        in_event_listener: bool = True,
        simple_format: bool = False,
        explicit_call: bool = False,
        root_path: str | None = None,
        oauth_token: Any = None,
    ) -> dict[str, Any]:
        """Gradio's, after the files of a new call are admitted (a generator's later steps carry no inputs)."""
        if iterator is None:
            inputs = self.admitted(self.fns[block_fn] if isinstance(block_fn, int) else block_fn, inputs, request)
        answer = await super().process_api(
            block_fn, inputs, state, request, iterator, session_hash, event_id, event_data, in_event_listener,
            simple_format, explicit_call, root_path, oauth_token,
        )  # fmt: skip
        self.record_owner(answer, request)
        return answer

    def record_owner(self, answer: dict[str, Any], request: Any) -> None:
        """Each file of an answer belongs to the login it goes to, before the answer leaves (with ``--auth``)."""
        if self.intake is None or not self.intake.owned.enabled or isinstance(request, list):
            return
        login, names, owned = login_of(request), self.intake.names, self.intake.owned

        def record(file: dict[str, Any]) -> dict[str, Any]:
            if isinstance(file.get("path"), str):
                owned.add(names.server_path(file["path"]), login)
            return file

        traverse(answer.get("data"), record, is_file_obj_with_meta)

    def admitted(self, block_fn: Any, inputs: list[Any], request: Any) -> list[Any]:
        """Each input with its files as server paths, or a refusal in one sentence before anything is read."""
        if self.intake is None or block_fn.batch:
            return inputs
        login = login_of(None if isinstance(request, list) else request)
        admitted = []
        for index, value in enumerate(inputs or []):
            try:
                admitted.append(self.intake.admit(value, login))
            except NotAdmitted as exc:
                component = block_fn.inputs[index] if index < len(block_fn.inputs) else None
                sentence = file_refusal(block_fn, component)
                log.info("refused a file the caller may not read (%s): %s", exc, sentence)
                raise gr.Error(sentence, print_exception=False) from None
        return admitted

    async def preprocess_data(
        self, block_fn: Any, inputs: list[Any], state: Any, explicit_call: bool = False
    ) -> list[Any]:
        inputs = with_defaults(block_fn, list(inputs or []))
        try:
            return list(await super().preprocess_data(block_fn, inputs, state, explicit_call))
        except gr.Error:
            raise
        except Exception as exc:
            sentence = intake_refusal(block_fn, list(inputs or []))
            log.info("refused at intake: %s (%s)", sentence, type(exc).__name__)
            raise gr.Error(sentence, print_exception=False) from exc

    async def postprocess_data(self, block_fn: Any, predictions: Any, state: Any) -> list[Any]:
        """Outputs name their files by served name (``outputs/...``), never by the server's path."""
        data = await super().postprocess_data(block_fn, predictions, state)
        if self.intake is None:
            return list(data)
        return list(traverse(data, self.intake.names.named, is_file_obj_with_meta))


def _answer(code: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message, "detail": message}, status_code=code)


async def unknown_endpoint(request: Request, exc: Exception) -> JSONResponse:
    log.info("%s %s: no such endpoint", request.method, request.url.path)
    return _answer(404, "There is no such endpoint; GET /gradio_api/info lists the ones this studio has.")


async def bad_request(request: Request, exc: Exception) -> JSONResponse:
    """Gradio raises TypeError/KeyError for malformed bodies; outside those routes it is a real fault (500)."""
    path = request.url.path
    if path.endswith("/upload"):
        log.info("%s %s: refused an upload part without a file", request.method, path)
        return _answer(400, "Each upload must be a file part named files, with a file name.")
    if "/queue/join" in path or "/call/" in path:
        log.info("%s %s: refused an unknown function index", request.method, path)
        return _answer(404, "There is no such endpoint; GET /gradio_api/info lists the ones this studio has.")
    log.error("%s %s failed: %s: %s", request.method, path, type(exc).__name__, exc)
    return _answer(500, "The server could not answer this request; the log says why.")


async def malformed_body(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 for a body that is not what a Gradio route takes, as one sentence instead of pydantic's list."""
    path = request.url.path
    log.info("%s %s: refused a malformed body", request.method, path)
    name = path.rstrip("/").rsplit("/", 1)[-1] if "/call/" in path else ""
    if name:
        return _answer(422, f'/{name} takes a JSON body like {{"data": [the values in order]}}.')
    return _answer(422, "This request's body is not what the route takes; GET /gradio_api/info lists the endpoints.")


def gradio_error_handlers() -> dict[type[Exception], Handler]:
    """FastAPI ``exception_handlers`` for Gradio's app (``app_kwargs={"exception_handlers": ...}``)."""
    return {
        FnIndexInferError: unknown_endpoint,
        TypeError: bad_request,
        KeyError: bad_request,
        RequestValidationError: malformed_body,
    }
