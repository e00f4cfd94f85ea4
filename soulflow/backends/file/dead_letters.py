"""Both dead-letter queues on files: `runtime/dlq/outbound.jsonl` (replies that could not be
delivered, kept whole for replay) and `runtime/dlq/inbound.jsonl` (messages that could not be
taken in, redacted), one record per line with the fields of `contracts.DeadLetter` and
`contracts.InboundDeadLetter`.

`DeadLetterQueue` and `InboundDeadLetters` are the files; `FileDeadLetters` and
`FileInboundDeadLetters` give them the asynchronous shape of the store port (`base.py`). Each
holds at most `OUTBOUND_DLQ_MAX` / `INBOUND_DLQ_MAX` entries; the one that fills it moves the
file aside under a dated name (`RecordLog`). The
inbound file is written with `fsync="always"`: a channel's cursor passes a quarantined message
only after its record is on disk, so a crash replays it and it is recorded again, never lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Generic, TypeVar

from soulflow.backends.base import INBOUND_DLQ_MAX, OUTBOUND_DLQ_MAX
from soulflow.contracts import DeadLetter, InboundDeadLetter, IntakeStage, OutboundMessage
from soulflow.security.dead_letters import build_inbound_letter
from soulflow.storage.jsonl import RecordLog

R = TypeVar("R")


class DeadLetterQueue(RecordLog[DeadLetter]):
    """Append on failure; list, remove (after replay) and purge for the operator."""

    def __init__(self, path: Path, *, fsync: str = "always",
                 max_entries: int = OUTBOUND_DLQ_MAX,
                 clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        super().__init__(path, DeadLetter.from_dict, fsync=fsync, max_entries=max_entries)

    def add(self, message: OutboundMessage, *, retry_count: int, error: str) -> DeadLetter:
        letter = DeadLetter(self._clock(), message, retry_count, error[:2000])
        self._append(letter.to_dict())
        return letter

    def remove(self, message_ids: Iterable[str]) -> int:
        """Drop entries by message id (after they were put back in the outbox)."""
        doomed = set(message_ids)
        kept = [e for e in self.entries() if e.message.message_id not in doomed]
        removed = len(self) - len(kept)
        self._keep([e.to_dict() for e in kept])
        return removed


class InboundDeadLetters(RecordLog[InboundDeadLetter]):
    """Append-only record of quarantined inbound messages; list and purge for the operator."""

    def __init__(self, path: Path, *, redact: Callable[[str], str] | None = None,
                 max_entries: int = INBOUND_DLQ_MAX,
                 clock: Callable[[], float] = time.time) -> None:
        self._redact = redact
        self._clock = clock
        super().__init__(path, InboundDeadLetter.from_dict, fsync="always",
                         max_entries=max_entries)

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


class _FileRecords(Generic[R]):
    """What both dead-letter queues share on the file backend: a `RecordLog` listed, purged
    and counted."""

    def __init__(self, log: RecordLog[R]) -> None:
        self.log = log

    async def entries(self) -> list[R]:
        return self.log.entries()

    async def recent(self, limit: int = 20) -> list[R]:
        return self.log.recent(limit)

    async def purge(self) -> int:
        return self.log.purge()

    async def count(self) -> int:
        return len(self.log)


class FileDeadLetters(_FileRecords[DeadLetter]):
    def __init__(self, dlq: DeadLetterQueue) -> None:
        super().__init__(dlq)
        self.dlq = dlq

    async def add(self, message: OutboundMessage, *, retry_count: int,
                  error: str) -> DeadLetter:
        return self.dlq.add(message, retry_count=retry_count, error=error)

    async def remove(self, message_ids: Iterable[str]) -> int:
        return self.dlq.remove(message_ids)


class FileInboundDeadLetters(_FileRecords[InboundDeadLetter]):
    def __init__(self, letters: InboundDeadLetters) -> None:
        super().__init__(letters)
        self.letters = letters

    async def add(self, *, provider: str, chat_id: str, message_id: str, sender_id: str,
                  stage: IntakeStage | str, error: str, content: str = "", raw: str = "",
                  key: str = "") -> InboundDeadLetter:
        return self.letters.add(provider=provider, chat_id=chat_id, message_id=message_id,
                                sender_id=sender_id, stage=stage, error=error,
                                content=content, raw=raw, key=key)
