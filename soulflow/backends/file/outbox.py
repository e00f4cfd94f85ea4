"""The outbox on files: every outbound message is written here before a send is attempted.

`runtime/bus/outbox.jsonl`. Records: `put` (the full message), `attempt` (a failed try and
when to try next), `sent`, and `dead` (moved to the DLQ). Entries still pending at boot are
sent again; compaction keeps only pending entries plus the inbound keys recently answered, so a
resumed inbound message is never answered twice.

`Outbox` is the file; `FileOutbox` is the store over it (`base.OutboxStore`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from soulflow.backends.base import Completing, Completion, OutboxWrite, WriteResult
from soulflow.contracts import OutboundMessage, OutboxEntry
from soulflow.errors import StoreError
from soulflow.storage.jsonl import JsonlFile

# How many answered inbound keys the outbox remembers (in memory and in each compaction).
# The set exists for one case: a crash after a reply was put and before the inbound journal's
# `done` record reached the disk; the channel manager writes that record right after the put,
# in the same step, so only the newest replies (those of the last fsync interval) can need it.
# The old cap, 100,000, made the set a steady RSS climb (about 145 bytes a key, 14 MiB when
# full, reached only after 100,000 replies: 5.5 hours at 5 msg/s) for no added safety.
ANSWERED_KEPT = 10_000
COMPACT_AFTER = 10_000  # records appended before the file is rewritten (more while many wait)


class Outbox:
    """Durable queue of replies awaiting delivery, in insertion order."""

    def __init__(self, path: Path, *, fsync: str = "interval",
                 answered_max: int = ANSWERED_KEPT,
                 clock: Callable[[], float] = time.time) -> None:
        self._file = JsonlFile(path, fsync=fsync)
        self._clock = clock
        self._answered_max = answered_max
        self._pending: OrderedDict[str, OutboxEntry] = OrderedDict()
        self._answered: OrderedDict[str, None] = OrderedDict()
        self._records_since_compaction = 0
        self._load()

    def _load(self) -> None:
        for record in self._file.iter_records():
            op, message_id = record.get("op"), record.get("id")
            if op == "put" and isinstance(record.get("msg"), dict):
                try:
                    message = OutboundMessage.from_dict(record["msg"])
                except TypeError:
                    continue
                self._pending[message.message_id] = OutboxEntry(
                    message, int(record.get("attempts", 0)), float(record.get("next_at", 0.0)))
                self._note_answered(message.inbound_key)
            elif op == "sending" and message_id in self._pending:
                self._pending[message_id].in_flight = True
            elif op == "attempt" and message_id in self._pending:
                entry = self._pending[message_id]
                entry.attempts = int(record.get("attempts", entry.attempts))
                entry.next_at = float(record.get("next_at", 0.0))
                entry.last_error = str(record.get("error", ""))
                entry.in_flight = False
            elif op in ("sent", "dead") and isinstance(message_id, str):
                self._pending.pop(message_id, None)
            elif op == "answered" and isinstance(record.get("key"), str):
                self._note_answered(record["key"])
        self.compact()

    def _note_answered(self, inbound_key: str | None) -> None:
        if inbound_key:
            self._answered[inbound_key] = None
            self._answered.move_to_end(inbound_key)
            while len(self._answered) > self._answered_max:
                self._answered.popitem(last=False)

    def put(self, message: OutboundMessage) -> bool:
        """Store a message for delivery; False if an entry with its id is already pending."""
        if message.message_id in self._pending:
            return False
        self._file.append({"op": "put", "msg": message.to_dict()})
        self._pending[message.message_id] = OutboxEntry(message)
        self._note_answered(message.inbound_key)
        self._records_since_compaction += 1
        return True

    def has_answered(self, inbound_key: str) -> bool:
        """True if a reply to this inbound message was already queued (perhaps sent)."""
        return inbound_key in self._answered

    def record_sending(self, message_id: str) -> None:
        """Note that a send is starting: if the process dies before it reports back, the
        next run knows the platform may already have the message."""
        if message_id in self._pending:
            self._file.append({"op": "sending", "id": message_id})
            self._records_since_compaction += 1

    def record_attempt(self, message_id: str, attempts: int, next_at: float, error: str) -> None:
        entry = self._pending.get(message_id)
        if entry is None:
            return
        entry.attempts, entry.next_at, entry.last_error = attempts, next_at, error[:500]
        self._file.append({"op": "attempt", "id": message_id, "attempts": attempts,
                           "next_at": next_at, "error": entry.last_error})
        self._records_since_compaction += 1

    def mark_sent(self, message_id: str, platform_ids: list[str] | None = None) -> None:
        if self._pending.pop(message_id, None) is None:
            return
        record: dict[str, Any] = {"op": "sent", "id": message_id, "at": self._clock()}
        if platform_ids:
            record["platform_ids"] = platform_ids
        self._file.append(record)
        self._records_since_compaction += 1

    def mark_dead(self, message_id: str) -> None:
        if self._pending.pop(message_id, None) is None:
            return
        self._file.append({"op": "dead", "id": message_id, "at": self._clock()})
        self._records_since_compaction += 1

    def get(self, message_id: str) -> OutboxEntry | None:
        return self._pending.get(message_id)

    def pending(self) -> list[OutboxEntry]:
        return list(self._pending.values())

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def needs_compaction(self) -> bool:
        return self._records_since_compaction > max(COMPACT_AFTER, 4 * len(self._pending))

    def compact(self) -> None:
        records: list[dict[str, Any]] = [{"op": "answered", "key": k} for k in self._answered]
        for entry in self._pending.values():
            records.append({"op": "put", "msg": entry.message.to_dict(),
                            "attempts": entry.attempts, "next_at": entry.next_at})
            if entry.in_flight:
                records.append({"op": "sending", "id": entry.message.message_id})
        self._file.rewrite(records)
        self._records_since_compaction = 0

    def sync(self) -> None:
        self._file.sync()

    def close(self) -> None:
        self._file.close()


Complete = Callable[[str, str, str | None], Awaitable[Completion]]


class FileOutbox:
    def __init__(self, outbox: Outbox, complete: Complete | None = None) -> None:
        self.outbox = outbox
        self._complete = complete  # the inbound journal's, for `store`'s completions

    async def put(self, message: OutboundMessage) -> bool:
        return self.outbox.put(message)

    async def store(self, writes: list[OutboxWrite]) -> list[WriteResult]:
        """One after the other: both journals are local files, nothing to batch."""
        results: list[WriteResult] = []
        for write in writes:
            if isinstance(write, Completing):
                if self._complete is None:
                    raise StoreError("this outbox was opened without its inbound journal")
                results.append([await self._complete(key, write.status, write.error)
                                for key in write.keys])
            else:
                results.append(await self.put(write))
        return results

    async def has_answered(self, inbound_key: str) -> bool:
        return self.outbox.has_answered(inbound_key)

    async def record_sending(self, message_id: str) -> bool:
        if self.outbox.get(message_id) is None:
            return False
        self.outbox.record_sending(message_id)
        return True

    async def record_attempt(self, message_id: str, attempts: int, next_at: float,
                             error: str) -> None:
        self.outbox.record_attempt(message_id, attempts, next_at, error)

    async def mark_sent(self, message_id: str, platform_ids: list[str] | None = None) -> None:
        self.outbox.mark_sent(message_id, platform_ids)

    async def mark_dead(self, message_id: str) -> None:
        self.outbox.mark_dead(message_id)

    async def get(self, message_id: str) -> OutboxEntry | None:
        return self.outbox.get(message_id)

    async def pending(self) -> list[OutboxEntry]:
        return self.outbox.pending()

    async def count(self) -> int:
        return len(self.outbox)
