"""Exception hierarchy for the security package.

Every error message is one sentence that names the problem and the fix, because these errors
surface to operators in logs and CLI output and must be actionable without reading the code.
No message ever contains a secret value; names and paths only.
"""

from __future__ import annotations

from soulflow.errors import SoulFlowError


class SecurityError(SoulFlowError):
    """Base class: catch this to handle any failure of the security layer."""


class VaultError(SecurityError):
    """Something about the secret vault (its key, its file or an entry) is unusable."""


class KeyFileError(VaultError):
    """`master.key` is missing, unsafe or malformed; the vault refuses to use it."""


class KeyPermissionError(KeyFileError):
    """`master.key` can be read or written by group/others (or is not a regular file)."""


class InvalidKeyError(KeyFileError):
    """`master.key` does not hold exactly 32 bytes."""


class MissingKeyError(KeyFileError):
    """Secrets exist on disk but the key that decrypts them does not."""


class KeyRecoveryError(KeyFileError):
    """An interrupted key rotation left files that no candidate key can decrypt."""


class VaultCorruptError(VaultError):
    """`secrets.json` could not be parsed; it has been moved aside, never silently dropped."""


class UnsupportedVaultVersion(VaultError):
    """`secrets.json` was written by a newer format version this code cannot read."""


class SecretNotFound(VaultError):
    """No secret is stored under the requested name."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"secret {name!r} is not stored; set it with `soulflow secret set {name}`."
        )
        self.name = name


class InvalidSecretName(VaultError, ValueError):
    """A secret name is outside `[A-Za-z0-9_.-]{1,200}`."""


class InvalidCiphertext(VaultError):
    """A ciphertext token is malformed, tampered with, or was sealed with another key/name."""
