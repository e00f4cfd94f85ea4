"""The vault's sealed entries on files: ``runtime/security/secrets.json``, ``{"version": 1,
"secrets": {NAME: {"ciphertext", "updated_at", "scope"?}}}``, replaced atomically with mode
0600. Only ciphertexts pass through here; the key stays with `SecretVault` (security/vault.py).
The vault calls each method under its lock, which is what makes the file's read-modify-write
safe between the daemon and ``soulflow secret``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from soulflow.security.errors import UnsupportedVaultVersion, VaultCorruptError
from soulflow.security.vault_records import StoredSecret, entry_json, parse_entry
from soulflow.storage.atomic import quarantine_name, replace_durably, write_json_atomic

__all__ = ["FORMAT_VERSION", "FileSecretEntries", "write_secrets_file"]

log = logging.getLogger(__name__)

FORMAT_VERSION = 1


def write_secrets_file(path: Path, data: Any) -> None:
    """Replace ``secrets.json`` atomically with mode 0600 (storage's one atomic writer); keys
    sorted and ASCII-only, as the file has always been written."""
    write_json_atomic(path, data, indent=2, mode=0o600, sort_keys=True, ensure_ascii=True)


class FileSecretEntries:
    """``secrets.json``: ``{"version": 1, "secrets": {NAME: {"ciphertext", "updated_at",
    "scope"?}}}``, replaced atomically with mode 0600. A file that cannot be read is moved
    aside and reported (`VaultCorruptError`), never treated as empty."""

    shared = False  # the key file sits next to it, on the same disk

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def location(self) -> str:
        return str(self.path)

    def key_fingerprint(self, mine: str) -> str:
        return mine

    def read(self) -> dict[str, StoredSecret]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            self._quarantine(f"invalid JSON: {exc.__class__.__name__}")
        if not isinstance(data, dict):
            self._quarantine("top level is not an object")
        version = data.get("version")
        if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
            raise UnsupportedVaultVersion(
                f"{self.path} has format version {version}, newer than this soulflow "
                f"understands ({FORMAT_VERSION}); upgrade soulflow."
            )
        if version != FORMAT_VERSION:
            self._quarantine(f"unknown version {version!r}")
        secrets = data.get("secrets")
        if not isinstance(secrets, dict):
            self._quarantine("'secrets' is not an object")
        entries: dict[str, StoredSecret] = {}
        for name, entry in secrets.items():
            parsed = parse_entry(name, entry)
            if parsed is None:
                self._quarantine(f"malformed entry {str(name)[:60]!r}")
            entries[name] = parsed
        return entries

    def put(self, entries: Mapping[str, StoredSecret], *, keep_foreign: bool) -> list[str]:
        stored = self.read()
        refused = [name for name, entry in entries.items() if keep_foreign and
                   name in stored and stored[name].scope != entry.scope]
        if len(refused) < len(entries):
            stored.update({n: e for n, e in entries.items() if n not in refused})
            self._write(stored)
        return refused

    def delete(self, name: str, *, scope: str | None, any_scope: bool) -> bool:
        stored = self.read()
        old = stored.get(name)
        if old is None or (not any_scope and old.scope != scope):
            return False
        del stored[name]
        self._write(stored)
        return True

    def replace(self, expected: Mapping[str, StoredSecret],
                entries: Mapping[str, StoredSecret], *, key_fingerprint: str) -> None:
        # the vault's lock is held since `expected` was read: nobody else wrote meanwhile
        self._write(entries)

    def _write(self, entries: Mapping[str, StoredSecret]) -> None:
        write_secrets_file(self.path, {
            "version": FORMAT_VERSION,
            "secrets": {n: entry_json(e) for n, e in sorted(entries.items())},
        })

    def _quarantine(self, reason: str) -> NoReturn:
        """Move an unreadable ``secrets.json`` aside and raise; never treat it as empty."""
        target = quarantine_name(self.path)
        replace_durably(self.path, target)
        log.warning("vault file %s is unreadable (%s); moved it to %s", self.path, reason,
                    target)
        raise VaultCorruptError(
            f"{self.path} was unreadable ({reason}) and was moved to {target}; "
            "restore it from backup or set the secrets again."
        )
