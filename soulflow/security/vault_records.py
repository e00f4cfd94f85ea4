"""The records of ``secrets.json`` and how they are written: split out of `vault` so that
module holds only the vault's behaviour. See `soulflow.security.vault` for the format."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from soulflow.security.keyfile import fsync_dir


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


def write_json_atomic(path: Path, data: Any) -> None:
    """Replace ``path`` with ``data`` so readers see the old or the new file, never a mix.

    Temp file in the same directory (same filesystem, so the rename is atomic), fsync the
    data before the rename and the directory after it so the rename survives power loss.
    """
    payload = json.dumps(data, indent=2, sort_keys=True).encode("utf-8") + b"\n"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def entry_json(entry: StoredSecret) -> dict[str, str]:
    """One entry on disk; ``scope`` only when set, so global entries look as they always did."""
    data = {"ciphertext": entry.ciphertext, "updated_at": entry.updated_at}
    if entry.scope is not None:
        data["scope"] = entry.scope
    return data
