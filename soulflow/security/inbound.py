"""The security step of the inbound pipeline, run before a message is journaled.

Everything a message carries that could hold a secret (its text, thread context, attachment
names and paths) is sealed here, so the journal, the session, the logs, the events and the
model only ever see `{{secret:…}}` references. `/secret set NAME value` is special: its value
is stored under NAME and never written anywhere in clear.

Scopes: what is sealed or set in a chat belongs to that chat (it opens only in its runs). A
`/secret set` may not overwrite a name that belongs to the operator or to another chat unless
the sender is an admin; then the value is still sealed (as this chat's inbound value, so it is
never lost in clear) and the text names the sealed reference instead of NAME, which is how
`/secret set` learns it was refused. An admin's `/secret set` of an existing name keeps that
entry's scope (an admin updating the operator's token keeps it global).

The daemon calls `seal_off_loop`: finding what to seal is pure CPU and runs on the event loop;
only a message that holds something to store waits for the vault, in the place the vault's
store may wait (`SecretVault.offload`: on Redis the backend's store thread). An ordinary
message costs no store call at all.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from soulflow.contracts import InboundMessage
from soulflow.security.detectors import ALL_DETECTORS, find_sensitive_spans
from soulflow.security.seal import SealResult, inbound_secret_name, seal_inbound_sensitive_text
from soulflow.security.syntax import is_valid_name, secret_reference
from soulflow.security.vault import SecretVault, chat_scope

log = logging.getLogger(__name__)

_SECRET_SET = re.compile(r"^\s*/secret(?:@\S+)?\s+set\s+(\S+)\s+(.+?)\s*$", re.DOTALL)


@dataclass(slots=True)
class SealReport:
    sealed: int = 0
    stored_name: str | None = None  # set by `/secret set NAME value`


IsAdmin = Callable[[str, str], bool]
"""``(provider, user_id) -> bool``: `soulflow.conversation.access.AdminPolicy.is_admin`."""


class InboundSealer:
    def __init__(self, vault: SecretVault, is_admin: IsAdmin | None = None) -> None:
        self.vault = vault
        self._is_admin = is_admin

    async def seal_off_loop(self, message: InboundMessage) -> SealReport:
        """`seal`, with the vault's store calls off the event loop: the message is scanned
        here, and only if it holds something to seal (or is `/secret set`) is it sealed where
        the vault may wait. Raises as `seal` does; the message is then unchanged or partly
        sealed, and the caller must not store it."""
        if not needs_vault(message):
            return SealReport()
        return await self.vault.offload(self.seal, message)

    def seal(self, message: InboundMessage) -> SealReport:
        """Seal `message` in place; raises if the vault cannot store (the caller drops it)."""
        report = SealReport()
        command = _SECRET_SET.match(message.text)
        if command is not None and is_valid_name(command.group(1)):
            name, value = command.group(1), command.group(2)
            stored = self._store_named(message, name, value)
            message.text = f"/secret set {name} {secret_reference(stored)}"
            report.stored_name = name if stored == name else None
            report.sealed = 1
            return report
        report.sealed += self._seal_text(message, "text")
        if message.thread_context is not None:
            sealed_context = []
            for line in message.thread_context:
                result = self._seal(message, line)
                report.sealed += len(result.sealed)
                sealed_context.append(result.text)
            message.thread_context = tuple(sealed_context)
        for attachment in message.attachments:
            for field in ("name", "local_path", "url"):
                value = getattr(attachment, field)
                if value:
                    result = self._seal(message, value)
                    report.sealed += len(result.sealed)
                    setattr(attachment, field, result.text)
        if report.sealed:
            log.info("sealed %d sensitive value(s) in %s", report.sealed, message.key)
        return report

    def _store_named(self, message: InboundMessage, name: str, value: str) -> str:
        """Store ``/secret set NAME value``; return the name the value now lives under."""
        scope = chat_scope(message.provider, message.chat_id)
        if self._is_admin is not None and self._is_admin(message.provider, message.sender_id):
            existing = self.vault.info(name)
            self.vault.set(name, value, scope=existing.scope if existing else scope)
            return name
        if not self.vault.set_many({name: value}, scope=scope, keep_foreign=True):
            return name
        log.info("refused /secret set of %s in %s: the name belongs to another scope",
                 name, message.key)
        sealed = inbound_secret_name(message.provider, message.chat_id, "secret_set",
                                     self.vault.fingerprint(value))
        self.vault.set(sealed, value, scope=scope)
        return sealed

    def _seal_text(self, message: InboundMessage, field: str) -> int:
        result = self._seal(message, getattr(message, field))
        setattr(message, field, result.text)
        return len(result.sealed)

    def _seal(self, message: InboundMessage, text: str) -> SealResult:
        return seal_inbound_sensitive_text(text, provider=message.provider,
                                           chat_id=message.chat_id, vault=self.vault)


def needs_vault(message: InboundMessage) -> bool:
    """Whether sealing `message` stores anything: `/secret set NAME value`, or a sensitive
    value in any field `InboundSealer.seal` looks at. Pure CPU (the detectors only), so it
    may run on the event loop; `seal` finds the same values again."""
    command = _SECRET_SET.match(message.text)
    if command is not None and is_valid_name(command.group(1)):
        return True
    fields = [message.text, *(message.thread_context or ())]
    for attachment in message.attachments:
        fields += [value for name in ("name", "local_path", "url")
                   if (value := getattr(attachment, name))]
    return any(find_sensitive_spans(text, ALL_DETECTORS) for text in fields)
