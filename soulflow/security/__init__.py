"""SoulFlow security: secrets are sealed on arrival and opened only inside tool execution.

Modules, one concern each:

* `errors` - the exception hierarchy (`SecurityError` at the root).
* `syntax` - secret names, ``{{secret:...}}`` references and ``sv1.`` ciphertext tokens.
* `crypto` - AES-256-GCM with the secret name as associated data.
* `keyfile` - the ``master.key`` file and its private directory.
* `vault` - `SecretVault`, the encrypted store (entries may be scoped to a chat);
  `vault_records` - its on-disk records.
* `protected` - THE list of what nothing the agent runs may touch (key, vault, ``.env*``,
  ``runtime/``), for file tools and the code sandbox; where the key lives (`open_vault`).
* `detectors` - finding sensitive values in text (pure); `detection` - the shared types;
  `platform_tokens` - Telegram and Discord bot tokens.
* `seal` - moving detected values into the vault, leaving references.
* `references` - checking that referenced secrets can be opened; the user-facing message.
* `resolve` - opening references for a tool (all-or-nothing) and masking tool output.
* `redact` - blanking secrets in logs, sessions, journals, events and the dashboard;
  `redacting_provider` - the same for every request sent to a model.
"""

from soulflow.security.detectors import Detection, find_sensitive_spans
from soulflow.security.errors import (
    InvalidCiphertext,
    InvalidKeyError,
    InvalidSecretName,
    KeyFileError,
    KeyPermissionError,
    KeyRecoveryError,
    MissingKeyError,
    SecretNotFound,
    SecurityError,
    UnsupportedVaultVersion,
    VaultCorruptError,
    VaultError,
)
from soulflow.security.redact import RedactingFilter, Redactor
from soulflow.security.references import (
    ReferenceReport,
    inspect_secret_references_for_orchestration,
    secret_resolution_required_message,
)
from soulflow.security.resolve import ResolveReport, mask_known_secrets, resolve_secret_references
from soulflow.security.seal import SealedValue, SealResult, seal_inbound_sensitive_text, seal_many
from soulflow.security.syntax import REDACTED, is_valid_token, secret_reference
from soulflow.security.vault import SecretInfo, SecretVault

__all__ = [
    "REDACTED",
    "Detection",
    "InvalidCiphertext",
    "InvalidKeyError",
    "InvalidSecretName",
    "KeyFileError",
    "KeyPermissionError",
    "KeyRecoveryError",
    "MissingKeyError",
    "RedactingFilter",
    "Redactor",
    "ReferenceReport",
    "ResolveReport",
    "SealResult",
    "SealedValue",
    "SecretInfo",
    "SecretNotFound",
    "SecretVault",
    "SecurityError",
    "UnsupportedVaultVersion",
    "VaultCorruptError",
    "VaultError",
    "find_sensitive_spans",
    "inspect_secret_references_for_orchestration",
    "is_valid_token",
    "mask_known_secrets",
    "resolve_secret_references",
    "seal_inbound_sensitive_text",
    "seal_many",
    "secret_resolution_required_message",
    "secret_reference",
]
