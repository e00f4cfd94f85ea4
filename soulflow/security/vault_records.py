"""The records of the vault's sealed entries (``secrets.json``, or the Redis hash) and how one
is read back: split out of `vault` so that module holds only the vault's behaviour. See
`soulflow.security.vault` for the format."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from soulflow.security.syntax import is_valid_name


@dataclass(frozen=True, slots=True)
class StoredSecret:
    """One ``secrets.json`` entry as stored: ciphertext only, never plaintext."""

    ciphertext: str
    updated_at: str
    scope: str | None = None

    def visible_in(self, chat: str | None) -> bool:
        """Whether a run of ``chat`` may see this entry (``None``: the operator sees all)."""
        return chat is None or self.scope is None or self.scope == chat


@dataclass(frozen=True, slots=True)
class SecretInfo:
    """What may be shown about a secret without decrypting it (for `secret list`)."""

    name: str
    updated_at: str
    scope: str | None = None


def chat_scope(provider: str, chat_id: str) -> str:
    """The scope of secrets sealed in one chat: ``<provider>:<chat_id>`` (threads included)."""
    return f"{provider}:{chat_id}"


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def entry_json(entry: StoredSecret) -> dict[str, str]:
    """One entry on disk; ``scope`` only when set, so global entries look as they always did."""
    data = {"ciphertext": entry.ciphertext, "updated_at": entry.updated_at}
    if entry.scope is not None:
        data["scope"] = entry.scope
    return data


def parse_entry(name: object, entry: object) -> StoredSecret | None:
    """One stored entry, or None if it is not one (a bad name or field)."""
    if not (isinstance(name, str) and is_valid_name(name) and isinstance(entry, dict)
            and isinstance(entry.get("ciphertext"), str)
            and isinstance(entry.get("updated_at"), str)
            and isinstance(entry.get("scope"), str | None)):
        return None
    return StoredSecret(entry["ciphertext"], entry["updated_at"], entry.get("scope"))
