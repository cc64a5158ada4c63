"""Saved voices on disk: one clip plus one JSON sidecar per voice, under ``<outputs>/voices/``.

The clip is kept exactly as uploaded once intake accepted it (so the same file always decodes to the same
samples, and the engine's profile cache, keyed by their hash, is warmed from it lazily on first use). Writes
are atomic (temp file + ``os.replace``), the sidecar last: a crash leaves at most an orphan clip, never a
listed half voice. Ids come from a strict pattern and names never become paths, so no name or id can make
this module touch anything outside the folder. Gradio-free and torch-free; the UI and the HTTP API share it.

A voice a backend fitted to the clip (Kokoro's style vector, ``FittedStyle``) is kept beside it in
``<id>.fitted.json`` (one per backend), written once the first request with the voice has fitted it, so no later
request, restart or worker fits it again. A damaged or foreign fitted file only costs a new fit.

Each voice belongs to the login that saved it (``owner``, ``""`` without ``--auth``). Every read takes ``owner``:
``None`` for everyone's voices (no login, or an admin), else only that login's, and another login's voice is
answered as missing, so its existence stays private. Names are unique per owner. A sidecar without an owner (saved
before voices had one) belongs to the admins (``voicelab.owners``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import threading
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from voicelab.errors import InvalidSettingError, StorageError, VoiceLabError
from voicelab.files import write_atomically
from voicelab.voice.fitted import FittedStyle
from voicelab.voice.intake import PromptIntake, load_prompt
from voicelab.voice.prompt import PromptAudio

log = logging.getLogger(__name__)

VOICES_DIRNAME = "voices"
FITTED_SUFFIX = ".fitted.json"
VOICE_ID = re.compile(r"voice_[0-9a-f]{16}")  # always fullmatch: "$" would take a trailing newline
MAX_NAME_CHARS = 64
RESERVED_NAMES = frozenset({"default"})
NAME_CHARS = re.compile(r"^[\w][\w .'()\-]*$")  # letters of any script, digits, a few separators


class VoiceNotFoundError(VoiceLabError):
    """No saved voice has that id or name (HTTP 404)."""

    default_message = "There is no saved voice with that id or name."


class DuplicateVoiceError(InvalidSettingError):
    """A saved voice already has that name (HTTP 400)."""

    default_message = "A saved voice already has that name."


@dataclass(frozen=True)
class SavedVoice:
    """One saved voice: its id, the name users pick it by, when it was saved, its clip and transcript."""

    voice_id: str
    name: str
    created_at: int  # unix seconds
    transcript: str
    clip_path: Path
    duration_s: float
    sha256: str
    owner: str = ""  # the login that saved it ("" without --auth, or saved before voices had owners)

    @property
    def fitted_path(self) -> Path:
        """Where the voices backends fitted to this clip are kept (beside the clip, in the voices folder)."""
        return self.clip_path.with_name(f"{self.voice_id}{FITTED_SUFFIX}")


def fitted_voice(voice: SavedVoice, backend: str) -> FittedStyle | None:
    """The voice ``backend`` fitted to this saved clip, if one was kept and is this clip's."""
    try:
        stored = json.loads(voice.fitted_path.read_text(encoding="utf-8"))
        fitted = FittedStyle.from_json(stored[backend])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.info("no fitted %s voice for %s: %s", backend, voice.voice_id, exc)
        return None
    return fitted if fitted.prompt_sha256 == voice.sha256 else None


def keep_fitted_voice(voice: SavedVoice, fitted: FittedStyle) -> None:
    """Store ``fitted`` beside the saved clip (replacing that backend's earlier one); skipped where the voice was
    deleted meanwhile or the fit is not of its clip. Raises ``StorageError`` where the folder refuses the write."""
    if fitted.prompt_sha256 != voice.sha256 or not voice.clip_path.with_suffix(".json").is_file():
        return
    try:
        stored = json.loads(voice.fitted_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        stored = {}
    stored = stored if isinstance(stored, dict) else {}
    stored[fitted.backend] = fitted.to_json()
    try:
        write_atomically(voice.clip_path.parent, voice.fitted_path, json.dumps(stored).encode("utf-8"))
    except OSError as exc:
        raise StorageError(f"The fitted voice could not be kept ({exc.strerror or exc}).") from exc
    log.info("kept the fitted %s voice of %s", fitted.backend, voice.voice_id)


def check_name(name: object) -> str:
    """The name, trimmed, or the sentence saying what a voice name may be."""
    if not isinstance(name, str) or not unicodedata.normalize("NFC", name).strip():
        raise InvalidSettingError("Please give the voice a name.")
    cleaned = unicodedata.normalize("NFC", name).strip()
    if len(cleaned) > MAX_NAME_CHARS:
        raise InvalidSettingError(f"A voice name may have at most {MAX_NAME_CHARS} characters.")
    if not NAME_CHARS.match(cleaned) or "__" in cleaned:
        raise InvalidSettingError(
            "A voice name may use letters, digits, spaces and . ' ( ) - _ and must start with a letter or digit."
        )
    if cleaned.lower() in RESERVED_NAMES:
        raise InvalidSettingError(f"The name {cleaned!r} is reserved for the built-in voice.")
    return cleaned


class VoiceStore:
    """The voices folder. A lock makes the name check and the save one step; each write is one atomic rename."""

    def __init__(self, root: str | Path, max_upload_bytes: int = 50 * 2**20) -> None:
        self.root = Path(os.path.abspath(root))
        self.max_upload_bytes = max_upload_bytes
        self.intake = PromptIntake()  # a saved voice used again is not decoded and checked again
        self._lock = threading.Lock()

    # ---- writing ----

    def save(self, name: str, clip: bytes, transcript: str = "", suffix: str = ".wav", owner: str = "") -> SavedVoice:
        """Check the name (unique among ``owner``'s voices) and the clip (intake), then store both for ``owner``."""
        cleaned = check_name(name)
        prompt = load_prompt(clip, transcript.strip(), max_bytes=self.max_upload_bytes)
        ext = suffix.lower() if re.fullmatch(r"\.[a-z0-9]{1,5}", suffix.lower()) else ".audio"
        with self._lock:
            if self._find_name(cleaned, owner) is not None:
                raise DuplicateVoiceError(f"A saved voice is already called {cleaned!r}; please choose another name.")
            voice_id = f"voice_{secrets.token_hex(8)}"
            sidecar = {
                "id": voice_id,
                "name": cleaned,
                "created_at": int(time.time()),
                "transcript": prompt.transcript,
                "clip": f"{voice_id}{ext}",
                "duration_s": round(prompt.duration_s, 3),
                "sha256": prompt.sha256,
                "owner": owner,
            }
            self._write(voice_id, ext, clip, sidecar)
        log.info("saved voice %s (%s)", cleaned, voice_id)
        return self._voice_from(sidecar)

    def _write(self, voice_id: str, ext: str, clip: bytes, sidecar: dict[str, object]) -> None:
        clip_path = self._path(voice_id, ext)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._atomic_write(clip_path, clip)
            self._atomic_write(self._path(voice_id, ".json"), json.dumps(sidecar, indent=2).encode("utf-8"))
        except OSError as exc:
            with contextlib.suppress(OSError):
                clip_path.unlink()
            raise StorageError(
                f"The voice could not be saved to {self.root} ({exc.strerror or exc}); nothing was kept."
            ) from exc

    def _atomic_write(self, target: Path, data: bytes) -> None:
        write_atomically(self.root, target, data)

    def delete(self, voice_id: str, owner: str | None = None) -> SavedVoice:
        """Remove a voice (sidecar first, so it leaves the list at once); ``VoiceNotFoundError`` if unknown (or
        not ``owner``'s)."""
        with self._lock:
            voice = self.get(voice_id, owner)
            try:
                self._path(voice_id, ".json").unlink(missing_ok=True)
                voice.clip_path.unlink(missing_ok=True)
                voice.fitted_path.unlink(missing_ok=True)
            except OSError as exc:
                raise StorageError(f"The voice could not be deleted ({exc.strerror or exc}).") from exc
        return voice

    # ---- reading ----

    def list(self, owner: str | None = None) -> list[SavedVoice]:
        """Every readable voice (only ``owner``'s when given), oldest first; damaged sidecars are skipped."""
        if not self.root.is_dir():
            return []
        found = []
        for path in sorted(self.root.glob("voice_*.json")):
            if not VOICE_ID.fullmatch(path.stem):
                continue
            try:
                found.append(self.get(path.stem))
            except (VoiceNotFoundError, StorageError) as exc:
                log.warning("skipping saved voice %s: %s", path.stem, exc)
        found = [v for v in found if owner is None or v.owner == owner]
        return sorted(found, key=lambda v: (v.created_at, v.name.lower()))

    def get(self, voice_id: str, owner: str | None = None) -> SavedVoice:
        """One voice by id; with ``owner``, another login's voice is answered as missing."""
        if not isinstance(voice_id, str) or not VOICE_ID.fullmatch(voice_id):
            raise VoiceNotFoundError(f"There is no saved voice with the id {str(voice_id)[:80]!r}.")
        sidecar_path = self._path(voice_id, ".json")
        if not sidecar_path.is_file():
            raise VoiceNotFoundError(f"There is no saved voice with the id {voice_id!r}.")
        try:
            voice = self._voice_from(json.loads(sidecar_path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StorageError(f"The saved voice {voice_id} is damaged and cannot be read.") from exc
        if owner is not None and voice.owner != owner:
            raise VoiceNotFoundError(f"There is no saved voice with the id {voice_id!r}.")
        if voice.voice_id != voice_id or not voice.clip_path.is_file():
            raise StorageError(f"The saved voice {voice_id} has lost its audio clip.")
        return voice

    def find(self, id_or_name: str, owner: str | None = None) -> SavedVoice:
        """A voice by id, or by name (case-insensitive), among ``owner``'s (everyone's for ``None``: the oldest
        of that name); ``VoiceNotFoundError`` names what was asked."""
        if VOICE_ID.fullmatch(id_or_name.strip()):
            return self.get(id_or_name.strip(), owner)
        voice = self._find_name(id_or_name.strip(), owner)
        if voice is None:
            raise VoiceNotFoundError(f"There is no saved voice called {id_or_name[:80]!r}.")
        return voice

    def prompt(self, voice: SavedVoice) -> PromptAudio:
        """The voice's clip through intake, exactly as when it was saved."""
        return self.intake.load(voice.clip_path, voice.transcript, max_bytes=self.max_upload_bytes)

    def _find_name(self, name: str, owner: str | None) -> SavedVoice | None:
        wanted = unicodedata.normalize("NFC", name).casefold()
        return next((v for v in self.list(owner) if v.name.casefold() == wanted), None)

    def _voice_from(self, data: dict[str, object]) -> SavedVoice:
        voice_id, clip = str(data["id"]), str(data["clip"])
        if not clip.startswith(voice_id) or "/" in clip or "\\" in clip:
            raise ValueError("clip name does not belong to the voice")
        return SavedVoice(
            voice_id=voice_id,
            name=str(data["name"]),
            created_at=int(str(data["created_at"])),
            transcript=str(data.get("transcript", "")),
            clip_path=self._path(voice_id, clip[len(voice_id) :]),
            duration_s=float(str(data.get("duration_s", 0.0))),
            sha256=str(data.get("sha256", "")),
            owner=str(data.get("owner") or ""),
        )

    def _path(self, voice_id: str, suffix: str) -> Path:
        """A file of a voice, refusing any id or link that would leave the voices folder."""
        if not VOICE_ID.fullmatch(voice_id):
            raise VoiceNotFoundError("That is not a saved voice id.")
        path = self.root / f"{voice_id}{suffix}"
        if path.is_symlink() or not path.resolve().is_relative_to(self.root.resolve()):
            raise StorageError("That saved voice points outside the voices folder and was refused.")
        return path
