"""Who owns what VoiceLab keeps, and who may see it.

Every stored thing (a History entry and its files, a saved voice, an upload, a cached result) belongs to the login
that made it (``""`` without ``--auth``). With ``--auth`` a login sees, plays, downloads, uses and deletes only its
own; the logins in ``--admins`` see everyone's. Without ``--auth`` there is one user, who sees everything.

Migration: entries written before they carried an owner (or made without ``--auth``) have the owner ``""``, and
``""`` belongs to the admins: no other login ever sees them. Nothing on disk is rewritten. Gradio-free, torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from voicelab.settings import Settings


@dataclass(frozen=True)
class Login:
    """Who is asking: a login of ``--auth`` (``""`` without it) and whether it is one of the admins."""

    name: str = ""
    admin: bool = False

    @property
    def sees_all(self) -> bool:
        """No login (a studio without ``--auth``) or an admin: every owner's entries."""
        return not self.name or self.admin

    @property
    def viewer(self) -> str | None:
        """The ``owner`` filter the stores take: ``None`` for everyone's, else this login's own."""
        return None if self.sees_all else self.name

    def sees(self, owner: str) -> bool:
        return self.sees_all or owner == self.name


def admins_of(settings: Settings) -> frozenset[str]:
    """The logins that see every login's things: ``--admins``, and ``--history-admins`` (its older name)."""
    names = f"{settings.admins},{settings.history_admins}".split(",")
    return frozenset(name.strip() for name in names if name.strip())


def login_named(name: str, admins: frozenset[str]) -> Login:
    return Login(name, bool(name) and name in admins)
