"""API keys per login: generated, stored hashed, shown once, revocable (``python -m voicelab keys ...``).

A key is ``vl_`` and 32 random bytes (``secrets.token_urlsafe``); the file keeps only its SHA-256, which is enough
for a random key (it is not a password: there is nothing to guess). The file is JSON, written atomically and
readable by its owner only::

    {"version": 1, "keys": [{"id": "key_1a2b3c4d", "login": "ann", "sha256": "…", "created_at": 1764662400}]}

The server reads the file again whenever it changes, so a key added or revoked counts at once, without a restart.
A key names its login for every API route; the password of ``--auth`` is never an API key. Gradio-free.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from voicelab.errors import InvalidSettingError, StorageError
from voicelab.files import display_path, write_atomically

KEY_PREFIX = "vl_"
KEY_ID = re.compile(r"key_[0-9a-f]{8}")
LOGIN_NAME = re.compile(r"[^\s,:]{1,64}")  # what --auth can name: no spaces, commas or colons
SCHEMA_VERSION = 1
ADD_COMMAND = "python -m voicelab keys add LOGIN"


@dataclass(frozen=True)
class ApiKey:
    """One key as the file keeps it (never the key itself)."""

    key_id: str
    login: str
    sha256: str
    created_at: int  # unix seconds


@dataclass(frozen=True)
class NewKey:
    """A key just made: the record kept, and the key, shown this once."""

    record: ApiKey
    key: str


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class ApiKeys:
    """The key file. ``login_for`` is what the API asks on every request; the CLI adds, lists and revokes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(os.path.abspath(path))
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self._keys: tuple[ApiKey, ...] = ()

    # ---- reading ----

    def records(self) -> tuple[ApiKey, ...]:
        """Every key in the file (none when there is no file yet), read again when the file changed."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return ()
        except OSError as exc:
            raise StorageError(f"The API key file {display_path(self.path)} cannot be read ({exc.strerror}).") from exc
        with self._lock:
            seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)  # a write replaces the file: a new inode
            if self._seen != seen:
                self._keys, self._seen = self._read(), seen
            return self._keys

    def _read(self) -> tuple[ApiKey, ...]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return tuple(
                ApiKey(str(k["id"]), str(k["login"]), str(k["sha256"]), int(k["created_at"])) for k in data["keys"]
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StorageError(f"The API key file {display_path(self.path)} is damaged and cannot be read.") from exc

    def login_for(self, key: str) -> str | None:
        """The login a key belongs to, or ``None`` for a key this file does not hold (every record is compared)."""
        wanted = digest(key)
        found = None
        for record in self.records():
            if hmac.compare_digest(wanted, record.sha256):
                found = record.login
        return found

    # ---- writing ----

    def add(self, login: str) -> NewKey:
        """A new key for ``login``; the caller shows ``key`` once, the file keeps its hash."""
        if not isinstance(login, str) or not LOGIN_NAME.fullmatch(login):
            raise InvalidSettingError("A login name has 1 to 64 characters and no spaces, commas or colons.")
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        record = ApiKey(f"key_{secrets.token_hex(4)}", login, digest(key), int(time.time()))
        self._write((*self.records(), record))
        return NewKey(record, key)

    def revoke(self, key_id: str) -> ApiKey:
        """Remove one key by its id; it stops working at once."""
        kept = [k for k in self.records() if k.key_id != key_id.strip()]
        gone = [k for k in self.records() if k.key_id == key_id.strip()]
        if not gone:
            raise InvalidSettingError(f"There is no API key with the id {key_id.strip()[:40]!r}.")
        self._write(tuple(kept))
        return gone[0]

    def _write(self, keys: tuple[ApiKey, ...]) -> None:
        records = [{"id": k.key_id, "login": k.login, "sha256": k.sha256, "created_at": k.created_at} for k in keys]
        body = json.dumps({"version": SCHEMA_VERSION, "keys": records}, indent=2).encode("utf-8")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.path.parent, self.path, body)
            os.chmod(self.path, 0o600)
        except OSError as exc:
            where = display_path(self.path)
            raise StorageError(f"The API key file {where} could not be written ({exc.strerror or exc}).") from exc
