"""`/secret list | set NAME value | rm NAME`: manage the vault from a chat, values never shown.

By the time this runs, `/secret set`'s value is already in the vault and the message text
holds only a reference (the inbound sealer did it before journaling).
"""

from __future__ import annotations

from soulflow.bus.messages import InboundMessage
from soulflow.channels.base import Command
from soulflow.channels.commands import CommandHandler
from soulflow.security.syntax import is_valid_name
from soulflow.security.vault import SecretVault

USAGE = ("Usage: /secret list | /secret set NAME value (in a direct message) | /secret rm NAME. "
         "Use a stored secret in a request as {{secret:NAME}}.")


def make_secret_command(vault: SecretVault) -> CommandHandler:
    async def handle(command: Command, message: InboundMessage) -> str:
        words = command.args.split()
        action = words[0].casefold() if words else ""
        if action == "list":
            names = [n for n in vault.names() if not n.startswith("inbound.")]
            sealed = len(vault.names()) - len(names)
            listed = ", ".join(names) if names else "none"
            return f"Stored secrets: {listed}. ({sealed} value(s) sealed from chat messages.)"
        if action == "set" and len(words) >= 2 and is_valid_name(words[1]):
            name = words[1]
            if not vault.has(name):
                return f"{USAGE}"
            if message.is_direct:
                return f"Stored secret {name}. Refer to it as {{{{secret:{name}}}}}."
            return (f"Stored secret {name}, but this is not a direct message: everyone here saw "
                    "the value, so consider it exposed and rotate it. Next time, send /secret "
                    "set to me directly.")
        if action in ("rm", "remove", "delete") and len(words) == 2:
            removed = vault.remove(words[1])
            return f"Removed secret {words[1]}." if removed else f"There is no secret {words[1]}."
        return USAGE

    return handle
