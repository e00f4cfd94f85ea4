"""``{{secret:NAME}}`` in a server's ``env`` and ``headers``, filled in from the vault.

Which scope: only **global** entries (set by the operator with ``soulflow secret set NAME``,
no chat scope). An MCP server is shared by every chat, so a value sealed in one chat must not
become every chat's; and a name the operator referenced but never set must not be fillable by
whoever types ``/secret set NAME`` in some chat first. A reference to a missing, chat-scoped
or undecryptable secret stops that server's start with a sentence naming the secret, never
its value.

The values are resolved each time the server (re)starts, so ``soulflow secret set`` takes
effect at the next restart; they go to the server's environment or request headers only,
and the daemon's redactor learns them, so a server echoing one back is blanked before the
model, a log line or the page could show it.
"""

from __future__ import annotations

from collections.abc import Mapping

from soulflow.agent.tools.mcp_client.config import McpConfigError
from soulflow.security.errors import SecretNotFound, SecurityError
from soulflow.security.syntax import REFERENCE_RE, is_valid_name
from soulflow.security.vault import SecretVault


class McpSecretError(McpConfigError):
    """A referenced secret cannot be used; names the secret, never a value."""


def references(values: Mapping[str, str]) -> list[str]:
    """The secret names referenced in ``values``, in order, without repeats."""
    seen: list[str] = []
    for value in values.values():
        for match in REFERENCE_RE.finditer(value):
            if match.group("name") not in seen:
                seen.append(match.group("name"))
    return seen


def resolve(values: Mapping[str, str], vault: SecretVault | None, *,
            where: str) -> tuple[dict[str, str], list[str]]:
    """``values`` with every reference replaced by its global vault value, and the values
    opened (for the redactor). Blocking (the vault reads its file): call it off the loop."""
    names = references(values)
    if not names:
        return dict(values), []
    if vault is None:
        raise McpSecretError(f"{where} references secrets but there is no vault")
    opened: dict[str, str] = {}
    for name in names:
        if not is_valid_name(name):
            raise McpSecretError(f"{where}: {name[:40]!r} is not a valid secret name")
        try:
            info = vault.info(name)
            if info is None:
                raise SecretNotFound(name)
            if info.scope is not None:
                raise McpSecretError(
                    f"{where}: the secret {name} is scoped to one chat; MCP servers use only "
                    f"global secrets (set it with `soulflow secret set {name}`)")
            opened[name] = vault.get(name)
        except SecretNotFound:
            raise McpSecretError(f"{where}: the secret {name} is not in the vault (set it "
                                 f"with `soulflow secret set {name}`)") from None
        except (SecurityError, OSError) as exc:
            raise McpSecretError(f"{where}: the secret {name} cannot be opened "
                                 f"({type(exc).__name__})") from None

    def fill(text: str) -> str:
        return REFERENCE_RE.sub(lambda m: opened[m.group("name")], text)

    return {key: fill(value) for key, value in values.items()}, list(opened.values())
