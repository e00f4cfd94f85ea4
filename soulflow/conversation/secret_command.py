"""`/secret list | set NAME value | rm NAME`: manage the vault from a chat, values never shown.

By the time this runs, `/secret set`'s value is already in the vault and the message text
holds only a reference (the inbound sealer did it before journaling, see
`soulflow.security.inbound`).

Every answer reads or changes the vault's entries, so it is made where the vault may wait
(`SecretVault.offload`: on Redis in the backend's store thread, not on the event loop).

Scopes: in a chat, a user sees and removes only that chat's secrets; the operator's (global)
secrets and other chats' are invisible to them, and removing one answers exactly like a name
that does not exist. Admins (`AdminPolicy`; the local operator always) see every name with its
scope and may remove any.
"""

from __future__ import annotations

from soulflow.channels.base import Command
from soulflow.contracts import InboundMessage
from soulflow.conversation.access import AdminPolicy
from soulflow.conversation.commands import CommandHandler
from soulflow.security.seal import INBOUND_PREFIX
from soulflow.security.syntax import is_valid_name, secret_reference
from soulflow.security.vault import SecretInfo, SecretVault, chat_scope

USAGE = ("Usage: /secret list | /secret set NAME value (in a direct message) | /secret rm NAME. "
         "Use a stored secret in a request as {{secret:NAME}}.")


def make_secret_command(vault: SecretVault, admins: AdminPolicy | None = None) -> CommandHandler:
    """The `/secret` handler; ``admins`` None means nobody but the local operator is one."""
    policy = admins if admins is not None else AdminPolicy()

    async def handle(command: Command, message: InboundMessage) -> str:
        admin = policy.is_admin(message.provider, message.sender_id)
        # every answer reads or changes the entries: where the vault may wait, off the loop
        return await vault.offload(_answer, vault, command.args.split(), message, admin)

    return handle


def _answer(vault: SecretVault, words: list[str], message: InboundMessage, admin: bool) -> str:
    action = words[0].casefold() if words else ""
    scope = chat_scope(message.provider, message.chat_id)
    if action == "list":
        return _list(vault, scope, admin)
    if action == "set" and len(words) >= 2 and is_valid_name(words[1]):
        return _set_reply(vault, words, message, scope, admin)
    if action in ("rm", "remove", "delete") and len(words) == 2:
        name = words[1]
        removed = vault.remove(name) if admin else \
            vault.remove(name, scope=scope, any_scope=False)
        return f"Removed secret {name}." if removed else f"There is no secret {name}."
    return USAGE


def _list(vault: SecretVault, scope: str, admin: bool) -> str:
    """This chat's names (an admin: every name, with where it belongs)."""
    infos = vault.describe() if admin else [i for i in vault.describe(chat=scope)
                                            if i.scope == scope]
    named = [i for i in infos if not i.name.startswith(INBOUND_PREFIX + ".")]
    sealed = len(infos) - len(named)
    if admin:
        listed = ", ".join(f"{i.name} ({_where(i, scope)})" for i in named) or "none"
        return (f"Stored secrets (all chats; you are an admin): {listed}. ({sealed} value(s) "
                "sealed from chat messages.)")
    listed = ", ".join(i.name for i in named) or "none"
    return (f"Stored secrets of this chat: {listed}. ({sealed} value(s) sealed from this "
            "chat's messages.)")


def _where(info: SecretInfo, scope: str) -> str:
    if info.scope is None:
        return "global"
    return "this chat" if info.scope == scope else info.scope


def _set_reply(vault: SecretVault, words: list[str], message: InboundMessage, scope: str,
               admin: bool) -> str:
    name = words[1]
    if len(words) < 3 or words[2] != secret_reference(name):
        # the sealer refused the name (see soulflow.security.inbound) or nothing was sealed
        if len(words) >= 3 and words[2].startswith("{{secret:"):
            return (f"The name {name} is already used outside this chat, so your value was not "
                    f"stored under it (it was sealed, not kept in clear). Choose another name, "
                    f"e.g. /secret set MY_{name} value.")
        return USAGE
    if not vault.has(name, chat=None if admin else scope):
        return USAGE
    if message.is_direct:
        return f"Stored secret {name}. Refer to it as {{{{secret:{name}}}}}."
    return (f"Stored secret {name}, but this is not a direct message: everyone here saw "
            "the value, so consider it exposed and rotate it. Next time, send /secret "
            "set to me directly.")
