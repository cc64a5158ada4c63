"""Generation history on disk: one WAV plus one JSON sidecar per generation, under the outputs folder.

The folder is the database, so the history survives a soft restart and an app restart. Writes are atomic
(temp file + ``os.replace``) and the sidecar is written last: a crash mid-write leaves at most an orphan
WAV or a hidden temp file, never a listed half entry. Entry ids are validated against a strict pattern and
every path is checked to stay inside the folder, so no id can make this module touch anything outside it.

Each entry names its ``owner`` (the login that made it, ``""`` without ``--auth``); reads and deletes take ``owner``
(``None``: everyone's) and answer another login's entry as missing. An entry without an owner belongs to the admins
(``voicelab.owners``).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from voicelab.engine.messages import SynthesisRequest, SynthesisResult
from voicelab.errors import StorageError
from voicelab.files import display_path, write_atomically

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2  # 2: settings hold speed, language and the backend's options (1: VITS scales)
ENTRY_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{12}")  # always fullmatch: "$" would take a trailing newline
SECOND = len("20261202-081500")  # an id's prefix that names its second
STALE_TEMP_S = 3600.0


class EntryNotFoundError(StorageError):
    default_message = "That history entry no longer exists; the list has been refreshed."


@dataclass(frozen=True)
class HistoryEntry:
    """One saved generation as read back from its sidecar."""

    entry_id: str
    created: float  # unix seconds
    kind: str  # "speak", "clone" or "design"
    text: str
    instruction: str
    style: Mapping[str, Any]
    prompt_sha256: str | None
    backend: str
    settings: Mapping[str, Any]
    metrics: Mapping[str, Any]
    audio_path: Path
    owner: str = ""  # the login that made it ("" without --auth)
    prompt_transcript: str = ""  # what the prompt said, as the user gave it

    @property
    def duration_s(self) -> float:
        return float(self.metrics.get("duration_s", 0.0))

    @property
    def created_text(self) -> str:
        return datetime.fromtimestamp(self.created).strftime("%Y-%m-%d %H:%M:%S")


def _sidecar(
    request: SynthesisRequest, result: SynthesisResult, entry_id: str, kind: str, now: float, owner: str
) -> dict[str, Any]:
    return {
        "owner": owner,
        "version": SCHEMA_VERSION,
        "id": entry_id,
        "created": now,
        "created_utc": datetime.fromtimestamp(now, UTC).isoformat(timespec="seconds"),
        "kind": kind,
        "text": request.text,
        "instruction": request.instruction,
        "style": result.style.to_dict(),
        "prompt_sha256": request.prompt.sha256 if request.prompt is not None else None,
        "prompt_transcript": request.prompt.transcript if request.prompt is not None else "",
        "backend": result.backend,
        "settings": {
            "language": result.language or request.language,
            "speed": request.speed,
            "options": dict(request.options),
            "sentence_silence_s": request.sentence_silence_s,
            "seed": result.seed,
            "device": result.device,
            "dtype": result.dtype,
        },
        "metrics": result.metrics(),
        "audio": f"{entry_id}.wav",
    }


def encode_wav(audio: np.ndarray, sample_rate: int) -> bytes:
    """16-bit PCM WAV bytes: plays in every browser and halves the size of float32."""
    buffer = io.BytesIO()
    sf.write(buffer, np.clip(audio, -1.0, 1.0), sample_rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


class History:
    """The history folder. Thread-safe in practice: every write is a single atomic rename."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(os.path.abspath(root))

    # ---- writing ----

    def save(
        self, request: SynthesisRequest, result: SynthesisResult, kind: str = "speak", owner: str = ""
    ) -> HistoryEntry:
        """Store one generation; raises StorageError (with the OS's reason) if the folder can't take it."""
        now = time.time()
        entry_id = f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}-{result.job_id}"
        if not ENTRY_ID.fullmatch(entry_id):
            raise StorageError(f"The job id {result.job_id!r} cannot name a history entry.")
        sidecar = _sidecar(request, result, entry_id, kind, now, owner)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._atomic_write(self._path(entry_id, ".wav"), encode_wav(result.audio, result.sample_rate))
            self._atomic_write(
                self._path(entry_id, ".json"), json.dumps(sidecar, indent=2, ensure_ascii=False).encode("utf-8")
            )
        except OSError as exc:
            with contextlib.suppress(OSError):
                self._path(entry_id, ".wav").unlink()
            reason = exc.strerror or str(exc)
            raise StorageError(
                f"The audio was generated but could not be saved to the history folder "
                f"{display_path(self.root)} ({reason})."
            ) from exc
        return self._entry_from(sidecar)

    def _atomic_write(self, target: Path, data: bytes) -> None:
        write_atomically(self.root, target, data)

    # ---- reading ----

    def entries(self, limit: int | None = None, owner: str | None = None) -> list[HistoryEntry]:
        """Complete entries, newest first (only ``owner``'s when given); unreadable sidecars are skipped.

        An id orders entries by the second only (then by its random job id), so entries of the same second are
        read together and put in the order of their sidecars' ``created`` time: two quick generations used to
        come out in either order."""
        if not self.root.is_dir():
            return []
        ids = sorted((p.stem for p in self.root.glob("*.json") if ENTRY_ID.fullmatch(p.stem)), reverse=True)
        found: list[HistoryEntry] = []
        for entry_id in ids:
            if limit is not None and len(found) >= limit and entry_id[:SECOND] != found[-1].entry_id[:SECOND]:
                break
            try:
                found.append(self.get(entry_id, owner))
            except EntryNotFoundError:
                continue
            except StorageError as exc:
                log.warning("skipping history entry %s: %s", entry_id, exc)
        found.sort(key=lambda entry: (entry.entry_id[:SECOND], entry.created), reverse=True)
        return found if limit is None else found[:limit]

    def get(self, entry_id: str, owner: str | None = None) -> HistoryEntry:
        """One entry; with ``owner``, another login's entry is answered as missing (its existence stays private)."""
        sidecar_path = self._path(entry_id, ".json")
        audio_path = self._path(entry_id, ".wav")
        if not sidecar_path.is_file() or not audio_path.is_file():
            raise EntryNotFoundError()
        try:
            data = json.loads(sidecar_path.read_text(encoding="utf-8"))
            entry = self._entry_from(data)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StorageError(f"The history entry {entry_id} is damaged and cannot be read.") from exc
        if owner is not None and entry.owner != owner:
            raise EntryNotFoundError()
        return entry

    def _entry_from(self, data: Mapping[str, Any]) -> HistoryEntry:
        entry_id = str(data["id"])
        return HistoryEntry(
            entry_id=entry_id,
            created=float(data["created"]),
            kind=str(data["kind"]),
            text=str(data["text"]),
            instruction=str(data.get("instruction", "")),
            style=dict(data.get("style", {})),
            prompt_sha256=data.get("prompt_sha256"),
            prompt_transcript=str(data.get("prompt_transcript", "")),
            backend=str(data["backend"]),
            settings=dict(data.get("settings", {})),
            metrics=dict(data.get("metrics", {})),
            audio_path=self._path(entry_id, ".wav"),
            owner=str(data.get("owner") or ""),
        )

    # ---- deleting ----

    def delete(self, entry_id: str, owner: str | None = None) -> None:
        """Remove an entry (only ``owner``'s, when given): the sidecar first, so it leaves the list at once."""
        if owner is not None:
            self.get(entry_id, owner)
        sidecar_path, audio_path = self._path(entry_id, ".json"), self._path(entry_id, ".wav")
        try:
            sidecar_path.unlink(missing_ok=True)
            audio_path.unlink(missing_ok=True)
        except OSError as exc:
            raise StorageError(f"The history entry could not be deleted ({exc.strerror or exc}).") from exc

    def sweep(self, max_age_s: float = STALE_TEMP_S) -> int:
        """Remove temp files and sidecar-less WAVs left by a crash mid-write; returns how many went."""
        if not self.root.is_dir():
            return 0
        cutoff = time.time() - max_age_s
        removed = 0
        for path in self.root.iterdir():
            orphan = path.suffix == ".wav" and ENTRY_ID.fullmatch(path.stem) and not path.with_suffix(".json").exists()
            temp = path.name.startswith(".") and path.suffix == ".tmp"
            if (orphan or temp) and not path.is_symlink() and path.is_file() and path.stat().st_mtime < cutoff:
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed += 1
        return removed

    # ---- confinement ----

    def _path(self, entry_id: str, suffix: str) -> Path:
        """The file of an entry, refusing any id or link that would leave the history folder."""
        if not isinstance(entry_id, str) or not ENTRY_ID.fullmatch(entry_id):
            raise StorageError("That is not a history entry id.")
        path = self.root / f"{entry_id}{suffix}"
        if path.is_symlink() or not path.resolve().is_relative_to(self.root.resolve()):
            raise StorageError("That history entry points outside the history folder and was refused.")
        return path
