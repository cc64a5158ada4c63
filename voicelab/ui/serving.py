"""Safe serving: Gradio may read and write only inside the outputs folder, offline, with an upload limit.

Gradio serves three kinds of files: paths in ``allowed_paths``, its upload/cache folder (``GRADIO_TEMP_DIR``)
and its examples cache (``GRADIO_EXAMPLES_CACHE``, relative to the working directory by default). All three
are pointed inside the outputs folder here, so ``/gradio_api/file=...`` can reach nothing else; files are named
there by served name (``outputs/...``, ``voicelab.ui.served``), wherever the outputs folder lies. The
environment must be set before any component is built (components read ``GRADIO_TEMP_DIR`` when created),
which is why ``build_ui`` calls :func:`configure_environment` first. When the outputs folder cannot be written,
Gradio gets a private temporary folder instead (it still serves only that and the history folder), so the
app keeps speaking; generations are then not saved, and the page says so.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fastapi.middleware import Middleware

from voicelab.errors import InvalidSettingError
from voicelab.files import display_path
from voicelab.settings import Settings
from voicelab.ui.edges import gradio_error_handlers
from voicelab.ui.i18n import I18N
from voicelab.ui.served import ServedNames, ServedNamesMiddleware

log = logging.getLogger(__name__)

HISTORY_DIRNAME = "history"
GRADIO_DIRNAME = ".gradio"
CSS = """
.vl-meta { font-family: ui-monospace, monospace; font-size: 0.9em; }
.vl-panel .vl-gauge { margin: 0.2em 0 0.5em; }
.vl-gauge-bar { height: 0.55em; background: var(--neutral-200); border-radius: 3px; overflow: hidden; }
.vl-gauge-fill { height: 100%; background: var(--color-accent); }
.vl-gauge-label { display: flex; justify-content: space-between; font-size: 0.85em; }
.vl-muted { color: var(--body-text-color-subdued); font-size: 0.85em; margin: 0.3em 0; }
.vl-warning { color: var(--color-red-500, #c00); font-size: 0.9em; margin: 0.3em 0; }
.vl-summary { display: grid; grid-template-columns: auto 1fr auto 1fr; gap: 1px 8px; font-size: 0.82em; }
.vl-summary span { color: var(--body-text-color-subdued); white-space: nowrap; }
.vl-summary b { font-weight: 500; overflow-wrap: anywhere; }
"""


@dataclass(frozen=True)
class ServingPaths:
    """The folders the app may touch; everything Gradio serves lies under ``outputs``."""

    outputs: Path
    history: Path
    gradio_temp: Path
    examples_cache: Path
    notice: str = ""  # set when the outputs folder cannot be written: shown on the page


def serving_paths(settings: Settings) -> ServingPaths:
    outputs = settings.outputs_path
    gradio = outputs / GRADIO_DIRNAME
    return ServingPaths(outputs, outputs / HISTORY_DIRNAME, gradio / "uploads", gradio / "examples")


def configure_environment(settings: Settings) -> ServingPaths:
    """Point Gradio's folders inside outputs (or a private temp folder if outputs is unusable); no analytics."""
    paths = serving_paths(settings)
    problem = unwritable_reason(paths.gradio_temp)
    if problem:
        private = Path(tempfile.mkdtemp(prefix="voicelab-gradio-"))
        log.warning(
            "cannot write Gradio's folder %s (%s); using %s, and generations will not be saved",
            paths.gradio_temp,
            problem,
            private,
        )
        shown = display_path(paths.outputs)
        notice = f"The outputs folder {shown} cannot be written ({problem}), so generations are not saved."
        paths = replace(paths, gradio_temp=private / "uploads", examples_cache=private / "examples", notice=notice)
        paths.gradio_temp.mkdir()
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    os.environ["GRADIO_TEMP_DIR"] = str(paths.gradio_temp)
    os.environ["GRADIO_EXAMPLES_CACHE"] = str(paths.examples_cache)
    os.environ.pop("GRADIO_ALLOWED_PATHS", None)  # only launch_options decides what is served
    return paths


def unwritable_reason(folder: Path) -> str:
    """Why ``folder`` cannot be created or take a small file (the OS's words), or "" when it can."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder) as probe:
            probe.write(b"voicelab")
            probe.flush()
    except OSError as exc:
        return exc.strerror or str(exc)
    return ""


def parse_auth(auth: str) -> list[tuple[str, str]] | None:
    """``"user:password[,user2:password2]"`` → ``[("user", "password"), ...]``; empty → no login."""
    if not auth:
        return None
    logins = []
    for item in auth.split(","):
        user, sep, password = item.strip().partition(":")
        if not sep or not user or not password:
            raise InvalidSettingError("The auth setting must look like user:password (several: a:pw1,b:pw2).")
        logins.append((user, password))
    if len({user for user, _ in logins}) != len(logins):
        raise InvalidSettingError("The auth setting names a user twice.")
    return logins


def cache_cleanup(settings: Settings) -> tuple[int, int]:
    """Gradio's own ``delete_cache`` (frequency, age) in seconds, from the upload-cache age bound."""
    age = max(60, int(settings.upload_cache_max_age_min * 60))
    return min(age, 3600), age


def launch_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for ``Blocks.launch``: local, offline, confined to outputs, bounded uploads."""
    paths = serving_paths(settings)
    return {
        "server_name": settings.host,
        "server_port": settings.port,
        "share": False,
        "auth": parse_auth(settings.auth),
        "allowed_paths": [str(paths.history)],
        "blocked_paths": [],
        "max_file_size": settings.max_upload_mb * 1024 * 1024,
        "run_history": False,  # it can connect a remote bucket; VoiceLab keeps its own history
        "mcp_server": False,
        "enable_monitoring": False,
        "pwa": False,
        "ssr_mode": False,
        "footer_links": ["api"],
        "show_error": True,
        "css": CSS,
        "app_kwargs": {
            "exception_handlers": gradio_error_handlers(),
            "middleware": [Middleware(ServedNamesMiddleware, names=ServedNames(paths.outputs))],
        },
        "i18n": I18N,  # English and Chinese (voicelab.ui.i18n)
    }


def mount_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for ``gr.mount_gradio_app``: the launch options, less what only ``launch`` knows."""
    options = launch_options(settings)
    for name in ("share", "server_port"):
        options.pop(name)
    return options
