"""The security step of the inbound pipeline, run before a message is journaled.

Everything a message carries that could hold a secret (its text, thread context, attachment
names and paths) is sealed here, so the journal, the session, the logs, the events and the
model only ever see `{{secret:…}}` references. `/secret set NAME value` is special: its value
is stored under NAME and never written anywhere in clear.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from soulflow.bus.messages import InboundMessage
from soulflow.security.seal import SealResult, seal_inbound_sensitive_text
from soulflow.security.syntax import is_valid_name, secret_reference
from soulflow.security.vault import SecretVault

log = logging.getLogger(__name__)

_SECRET_SET = re.compile(r"^\s*/secret(?:@\S+)?\s+set\s+(\S+)\s+(.+?)\s*$", re.DOTALL)


@dataclass(slots=True)
class SealReport:
    sealed: int = 0
    stored_name: str | None = None  # set by `/secret set NAME value`


class InboundSealer:
    def __init__(self, vault: SecretVault) -> None:
        self.vault = vault

    def seal(self, message: InboundMessage) -> SealReport:
        """Seal `message` in place; raises if the vault cannot store (the caller drops it)."""
        report = SealReport()
        command = _SECRET_SET.match(message.text)
        if command is not None and is_valid_name(command.group(1)):
            name, value = command.group(1), command.group(2)
            self.vault.set(name, value)
            message.text = f"/secret set {name} {secret_reference(name)}"
            report.stored_name, report.sealed = name, 1
            return report
        report.sealed += self._seal_text(message, "text")
        context = message.metadata.get("thread_context")
        if isinstance(context, list):
            sealed_context = []
            for item in context:
                result = self._seal(message, str(item))
                report.sealed += len(result.sealed)
                sealed_context.append(result.text)
            message.metadata["thread_context"] = sealed_context
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

    def _seal_text(self, message: InboundMessage, field: str) -> int:
        result = self._seal(message, getattr(message, field))
        setattr(message, field, result.text)
        return len(result.sealed)

    def _seal(self, message: InboundMessage, text: str) -> SealResult:
        return seal_inbound_sensitive_text(text, provider=message.provider,
                                           chat_id=message.chat_id, vault=self.vault)
