"""Gradio's upload cache (``outputs/.gradio/uploads``), kept small and free of what a user deleted.

Gradio copies every file it serves or receives into this folder (content-named subfolders) and, left alone,
keeps uploads forever. :class:`UploadCache` bounds it by age and by total size (``--upload-cache-max-age-min``,
``--upload-cache-max-mb``), removes every cached copy of a History entry when the entry is deleted, and removes
the voice prompts a browser session uploaded when it ends (a prompt saved under My voices lives on
in ``outputs/voices``). It touches nothing outside its folder and never follows a link.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

RECENT_S = 60.0  # the size bound never removes files this young: Gradio may be serving them right now
MAX_SESSIONS = 1000  # browser sessions whose prompts are remembered for removal when they end


@dataclass(frozen=True)
class PruneReport:
    removed: int
    freed_bytes: int
    kept_bytes: int


class UploadCache:
    """The cache folder with its bounds; one per app (no module state), safe to call from handler threads."""

    def __init__(self, root: Path, max_age_s: float, max_bytes: int) -> None:
        self.root = Path(os.path.abspath(root))
        self.max_age_s, self.max_bytes = max_age_s, max_bytes
        self._lock = threading.Lock()
        self._prompts: dict[str, set[Path]] = {}

    def _files(self) -> list[tuple[float, int, Path]]:
        found = []
        for folder, _dirs, names in os.walk(self.root, followlinks=False):
            for name in names:
                path = Path(folder) / name
                with contextlib.suppress(OSError):
                    stat = path.lstat()
                    if not path.is_symlink():
                        found.append((stat.st_mtime, stat.st_size, path))
        return sorted(found)

    def _remove(self, path: Path) -> bool:
        try:
            path.unlink()
        except OSError:
            return False
        with contextlib.suppress(OSError):
            if path.parent != self.root:
                path.parent.rmdir()  # only when empty
        return True

    def prune(self, now: float | None = None) -> PruneReport:
        """Remove files older than the age bound, then the oldest until the folder fits the size bound."""
        now = time.time() if now is None else now
        removed = freed = 0
        with self._lock:
            files = self._files()
            total = sum(size for _, size, _ in files)
            for mtime, size, path in files:  # oldest first
                too_old = now - mtime > self.max_age_s
                too_big = total > self.max_bytes and now - mtime > RECENT_S
                if (too_old or too_big) and self._remove(path):
                    removed, freed, total = removed + 1, freed + size, total - size
        if removed:
            log.info("upload cache: removed %d files (%d bytes), %d bytes kept", removed, freed, total)
        return PruneReport(removed, freed, total)

    def remove_copies(self, names: tuple[str, ...], content: bytes | None = None) -> int:
        """Remove every cached file whose name starts with one of ``names`` or whose bytes equal ``content``."""
        removed = 0
        with self._lock:
            for _, size, path in self._files():
                same = content is not None and size == len(content) and _reads_as(path, content)
                if (path.name.startswith(names) or same) and self._remove(path):
                    removed += 1
        return removed

    def remember_prompt(self, session: str | None, path: str | os.PathLike[str]) -> None:
        """A prompt a browser session uploaded, removed when it ends (bounded: the oldest browser sessions drop)."""
        target = Path(os.path.abspath(path))
        if not session or not target.is_relative_to(self.root):
            return
        with self._lock:
            self._prompts.setdefault(session, set()).add(target)
            while len(self._prompts) > MAX_SESSIONS:
                self._prompts.pop(next(iter(self._prompts)))

    def end_session(self, session: str | None) -> int:
        """The browser session's tab was closed: its uploaded prompts go (saved voices keep their own copy)."""
        with self._lock:
            paths = self._prompts.pop(session or "", set())
            return sum(1 for path in paths if self._remove(path))


def _reads_as(path: Path, content: bytes) -> bool:
    try:
        return path.read_bytes() == content
    except OSError:
        return False
