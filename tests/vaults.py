"""Vaults on files for tests: the vault with its sealed entries in the directory's
`secrets.json`, as the file backend builds it (`backends/file/vault.py`)."""

from __future__ import annotations

from pathlib import Path

from soulflow.backends.file.vault import FileSecretEntries
from soulflow.config import Settings
from soulflow.security.protected import open_vault
from soulflow.security.vault import SECRETS_FILE, SecretVault


def file_vault(security_dir: Path, key_path: Path | None = None) -> SecretVault:
    """A vault in `security_dir` (key and `secrets.json`), or with its key at `key_path`."""
    return SecretVault(security_dir, key_path,
                       entries=FileSecretEntries(Path(security_dir) / SECRETS_FILE))


def workspace_vault(settings: Settings) -> SecretVault:
    """The workspace's vault as the daemon and `soulflow secret` open it on files."""
    return open_vault(settings, FileSecretEntries(
        settings.runtime_dir / "security" / SECRETS_FILE))
