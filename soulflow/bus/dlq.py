"""The dead-letter queue: replies that could not be delivered, kept whole for replay.

`runtime/dlq/outbound.jsonl`, one entry per line with the fields of the data map:
`at, provider, chat_id, message_id, reply_to, thread_id, retry_count, error, content, metadata`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from soulflow.bus.messages import OutboundMessage
from soulflow.storage.jsonl import RecordLog


@dataclass(slots=True)
class DeadLetter:
    at: float
    provider: str
    chat_id: str
    message_id: str
    reply_to: str | None
    thread_id: str | None
    retry_count: int
    error: str
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_outbound(cls, message: OutboundMessage, *, retry_count: int, error: str,
                      at: float) -> DeadLetter:
        metadata = dict(message.metadata)
        if message.inbound_key:
            metadata.setdefault("inbound_key", message.inbound_key)
        return cls(at, message.provider, message.chat_id, message.message_id, message.reply_to,
                   message.thread_id, retry_count, error, message.content, metadata)

    def to_outbound(self) -> OutboundMessage:
        metadata = {k: v for k, v in self.metadata.items() if k != "inbound_key"}
        metadata["replayed_from_dlq_at"] = self.at
        return OutboundMessage(provider=self.provider, chat_id=self.chat_id, content=self.content,
                               reply_to=self.reply_to, thread_id=self.thread_id,
                               message_id=self.message_id, metadata=metadata)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class DeadLetterQueue(RecordLog[DeadLetter]):
    """Append on failure; list, remove (after replay) and purge for the operator."""

    def __init__(self, path: Path, *, fsync: str = "always",
                 clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        super().__init__(path, lambda record: DeadLetter(**record), fsync=fsync)

    def add(self, message: OutboundMessage, *, retry_count: int, error: str) -> DeadLetter:
        letter = DeadLetter.from_outbound(message, retry_count=retry_count, error=error[:2000],
                                          at=self._clock())
        self._append(letter.to_dict())
        return letter

    def remove(self, message_ids: Iterable[str]) -> int:
        """Drop entries by message id (after they were put back in the outbox)."""
        doomed = set(message_ids)
        kept = [e for e in self.entries() if e.message_id not in doomed]
        removed = len(self) - len(kept)
        self._keep([e.to_dict() for e in kept])
        return removed
