"""The inbound dead-letter file: messages that could not be taken in, kept for the operator.

One poison message (a text UTF-8 cannot encode, an update the adapter cannot parse, a sealing
error, a command that crashes) must never wedge its channel: it is recorded here with the
stage and the error, its id is marked seen, and the channel moves on. The channel's cursor
passes it only after this record is on disk (`fsync="always"`), so a crash replays it and it
is recorded again rather than lost.

Nothing here is plaintext the sealer did not see: `content` and `raw` pass through a redactor
(known secrets and credential-shaped strings become `[REDACTED]`) and are capped.
`runtime/dlq/inbound.jsonl`, one entry per line:
`at, provider, chat_id, message_id, sender_id, stage, error, content, raw, key`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from soulflow.security.detectors import ALL_DETECTORS, find_sensitive_spans
from soulflow.security.syntax import REDACTED
from soulflow.storage.jsonl import RecordLog

CONTENT_CAP = 2000
RAW_CAP = 1000
ERROR_CAP = 500


class IntakeStage(StrEnum):
    """Where taking a message in failed."""

    PARSE = "parse"  # the adapter could not turn the platform's update into a message
    NORMALISE = "normalise"
    SEAL = "seal"
    JOURNAL = "journal"
    INTAKE = "intake"  # filtering, reactions, refusals
    PROCESS = "process"  # commands, input building: an error before the agent's answer


@dataclass(slots=True)
class InboundDeadLetter:
    at: float
    provider: str
    chat_id: str
    message_id: str
    sender_id: str
    stage: str
    error: str
    content: str
    raw: str = ""
    key: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> InboundDeadLetter:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


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


class InboundDeadLetters(RecordLog[InboundDeadLetter]):
    """Append-only record of quarantined inbound messages; list and purge for the operator."""

    def __init__(self, path: Path, *, redact: Callable[[str], str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._redact = redact
        self._clock = clock
        super().__init__(path, InboundDeadLetter.from_dict, fsync="always")

    def add(self, *, provider: str, chat_id: str, message_id: str, sender_id: str,
            stage: IntakeStage | str, error: str, content: str = "", raw: str = "",
            key: str = "") -> InboundDeadLetter:
        """Record one message; raises if it cannot be written (the caller must not move on)."""
        letter = build_inbound_letter(
            at=self._clock(), redact=self._redact, provider=provider, chat_id=chat_id,
            message_id=message_id, sender_id=sender_id, stage=stage, error=error,
            content=content, raw=raw, key=key)
        self._append(letter.to_dict())
        return letter
