"""Crash-safe file writes for the folders VoiceLab keeps (History, saved voices)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomically(folder: Path, target: Path, data: bytes) -> None:
    """Write ``data`` to a hidden temp file in ``folder``, fsync it and rename it over ``target``.

    A crash leaves at most a hidden ``.tmp`` file, never a half-written ``target``; an error removes the
    temp file and propagates (callers turn it into their own sentence).
    """
    fd, temp = tempfile.mkstemp(dir=folder, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def display_path(path: str | os.PathLike[str]) -> str:
    """How a server folder or file is named to users: relative to the working directory, never absolute.

    Outside the working directory only the last two parts are shown (``…/outputs/history``).
    """
    absolute = Path(os.path.abspath(path))
    cwd = Path.cwd()
    if absolute.is_relative_to(cwd):
        return str(absolute.relative_to(cwd)) or "."
    return "…/" + "/".join(absolute.parts[-2:])
