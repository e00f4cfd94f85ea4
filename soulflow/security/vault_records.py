"""The records of ``secrets.json`` and how they are written: split out of `vault` so that
module holds only the vault's behaviour. See `soulflow.security.vault` for the format."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from soulflow.storage.atomic import write_json_atomic


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


def write_secrets_file(path: Path, data: Any) -> None:
    """Replace ``secrets.json`` atomically with mode 0600 (storage's one atomic writer); keys
    sorted and ASCII-only, as the file has always been written."""
    write_json_atomic(path, data, indent=2, mode=0o600, sort_keys=True, ensure_ascii=True)


def entry_json(entry: StoredSecret) -> dict[str, str]:
    """One entry on disk; ``scope`` only when set, so global entries look as they always did."""
    data = {"ciphertext": entry.ciphertext, "updated_at": entry.updated_at}
    if entry.scope is not None:
        data["scope"] = entry.scope
    return data
