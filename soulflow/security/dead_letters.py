"""What a quarantined inbound message may keep: the inbound dead letter, capped and redacted.

One poison message (a text UTF-8 cannot encode, an update the adapter cannot parse, a sealing
error, a command that crashes) must never wedge its channel: it is recorded in the inbound DLQ
with the stage and the error, its id is marked seen, and the channel moves on (the channels'
quarantine, `soulflow/channels/poison.py`).

Nothing there is plaintext the sealer did not see: `content` and `raw` pass through a redactor
(known secrets and credential-shaped strings become `[REDACTED]`) and are capped. Every backend
builds the letter it stores with `build_inbound_letter`, so a record in Redis is exactly as
clean as one in `runtime/dlq/inbound.jsonl`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from soulflow.contracts import InboundDeadLetter, IntakeStage
from soulflow.security.detectors import ALL_DETECTORS, find_sensitive_spans
from soulflow.security.syntax import REDACTED

CONTENT_CAP = 2000
RAW_CAP = 1000
ERROR_CAP = 500


_SECRET_SET = re.compile(r"(/secret(?:@\S+)?\s+set\s+\S+\s+)\S.*", re.DOTALL | re.IGNORECASE)


def strict_redact(text: str) -> str:
    """What the sealer would have sealed, blanked: a message that failed sealing never had
    its secrets moved to the vault, so the DLQ masks with the sealer's own (broadest)
    detectors, and drops the value of a `/secret set NAME value` outright."""
    text = _SECRET_SET.sub(lambda m: m.group(1) + REDACTED, text)
    spans = find_sensitive_spans(text, ALL_DETECTORS)
    for span in reversed(spans):
        text = text[:span.start] + REDACTED + text[span.end:]
    return text


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _safe(text: str) -> str:
    """Encodable text whatever it holds (the DLQ must be writable for the very text that
    broke the journal): lone surrogates become U+FFFD."""
    return _SURROGATE.sub("\ufffd", str(text))


def build_inbound_letter(*, at: float, redact: Callable[[str], str] | None, provider: str,
                         chat_id: str, message_id: str, sender_id: str,
                         stage: IntakeStage | str, error: str, content: str = "",
                         raw: str = "", key: str = "") -> InboundDeadLetter:
    """The entry to store, capped and redacted: shared by every inbound DLQ backend, so a
    record in Redis is exactly as clean as one in the file."""

    def clean(text: str, cap: int) -> str:
        # redact the whole text first: cutting first could split a secret and hide it
        text = strict_redact(_safe(text))
        return (redact(text) if redact is not None else text)[:cap]

    return InboundDeadLetter(
        at=at, provider=_safe(provider)[:100], chat_id=_safe(chat_id)[:200],
        message_id=_safe(message_id)[:200], sender_id=_safe(sender_id)[:200],
        stage=str(stage), error=clean(error, ERROR_CAP), content=clean(content, CONTENT_CAP),
        raw=clean(raw, RAW_CAP), key=_safe(key)[:400])
