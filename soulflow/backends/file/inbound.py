"""The inbound journal on files: a message is written here before its channel cursor moves.

`runtime/bus/inbound.jsonl`. Records: `{"op":"in","msg":{…}}` when a message is accepted,
`{"op":"done","key","status"}` when it has been answered or its failure recorded, and
`{"op":"seen","key","at"}` carried over by compaction so deduplication survives restarts.
Whatever is `in` but not `done` at boot is work the previous process did not finish.

`InboundJournal` is the file; `FileInbound` is the store over it (`base.InboundStore`): the
journal plus the hand-out bookkeeping of `claim()`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from soulflow.backends.base import Completion
from soulflow.contracts import InboundMessage, ReplyStatus
from soulflow.storage.jsonl import JsonlFile

log = logging.getLogger(__name__)


class InboundJournal:
    """Durable record of accepted inbound messages, their completion, and seen ids."""

    def __init__(
        self,
        path: Path,
        *,
        fsync: str = "interval",
        seen_ttl_s: float = 7 * 24 * 3600,
        seen_max: int = 100_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._file = JsonlFile(path, fsync=fsync)
        self._seen_ttl_s = seen_ttl_s
        self._seen_max = seen_max
        self._clock = clock
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._pending: dict[str, InboundMessage] = {}
        self._records_since_compaction = 0
        self._load()

    def _load(self) -> None:
        for record in self._file.iter_records():
            op, key = record.get("op"), record.get("key")
            if op == "in" and isinstance(record.get("msg"), dict):
                try:
                    message = InboundMessage.from_dict(record["msg"])
                except TypeError as exc:
                    log.warning("inbound journal: skipped a malformed record (%s)", exc)
                    continue
                self._remember(message.key, float(record.get("at", message.received_at)))
                self._pending[message.key] = message
            elif op == "done" and isinstance(key, str):
                self._pending.pop(key, None)
            elif op == "seen" and isinstance(key, str):
                self._remember(key, float(record.get("at", 0.0)))
        self._expire_seen()
        self.compact()

    def _remember(self, key: str, at: float) -> None:
        self._seen[key] = at
        self._seen.move_to_end(key)

    def _expire_seen(self) -> None:
        """Forget ids past the TTL or over the cap, oldest first; never a pending one."""
        horizon = self._clock() - self._seen_ttl_s
        overflow = len(self._seen) - self._seen_max
        kept: OrderedDict[str, float] = OrderedDict()
        for key, at in self._seen.items():
            if key not in self._pending and (at < horizon or overflow > 0):
                overflow -= 1
                continue
            kept[key] = at
        self._seen = kept

    def is_seen(self, key: str) -> bool:
        return key in self._seen

    def accept(self, message: InboundMessage) -> bool:
        """Journal a new message; False (and nothing written) if it was seen before."""
        if message.key in self._seen:
            return False
        now = self._clock()
        self._file.append({"op": "in", "at": now, "msg": message.to_dict()})
        self._remember(message.key, now)
        self._pending[message.key] = message
        self._records_since_compaction += 1
        if len(self._seen) > self._seen_max * 1.1:  # trim in batches, not per message
            self._expire_seen()
        return True

    def mark_seen(self, keys: list[str]) -> None:
        """Record ids that must never be answered (history primed on a first read)."""
        fresh = [k for k in keys if k not in self._seen]
        if not fresh:
            return
        now = self._clock()
        self._file.append_many({"op": "seen", "key": k, "at": now} for k in fresh)
        for key in fresh:
            self._remember(key, now)

    def complete(self, key: str, status: ReplyStatus, error: str | None = None) -> None:
        """Mark a message done with how its turn ended (answered, max_turns, refused, ignored,
        failed with a reason, ...); the journal keeps the status's plain word."""
        if key not in self._pending:
            return
        record: dict[str, Any] = {"op": "done", "key": key, "status": str(status),
                                  "at": self._clock()}
        if error:
            record["error"] = error[:500]
        self._file.append(record)
        del self._pending[key]
        self._records_since_compaction += 1

    def is_pending(self, key: str) -> bool:
        """Accepted and not completed yet."""
        return key in self._pending

    def pending(self) -> list[InboundMessage]:
        """Unfinished messages in the order they arrived."""
        return sorted(self._pending.values(), key=lambda m: m.received_at)

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    @property
    def needs_compaction(self) -> bool:
        return self._records_since_compaction > max(10_000, 2 * len(self._seen))

    def compact(self) -> None:
        """Rewrite the file as seen ids plus pending messages only."""
        self._expire_seen()
        records: list[dict[str, Any]] = [
            {"op": "seen", "key": k, "at": at} for k, at in self._seen.items()
            if k not in self._pending
        ]
        records.extend({"op": "in", "at": m.received_at, "msg": m.to_dict()}
                       for m in self.pending())
        self._file.rewrite(records)
        self._records_since_compaction = 0

    def sync(self) -> None:
        self._file.sync()

    def close(self) -> None:
        self._file.close()


class FileInbound:
    """`InboundJournal` plus the hand-out bookkeeping of `claim()` (in memory: after a restart
    every pending message is handed out again, which is how the file backend resumes work)."""

    def __init__(self, journal: InboundJournal) -> None:
        self.journal = journal
        self._handed: set[str] = set()
        self._arrived = asyncio.Event()

    async def accept(self, message: InboundMessage) -> bool:
        accepted = self.journal.accept(message)
        if accepted:
            self._arrived.set()
        return accepted

    async def is_seen(self, key: str) -> bool:
        return self.journal.is_seen(key)

    async def mark_seen(self, keys: list[str]) -> None:
        self.journal.mark_seen(keys)

    async def complete(self, key: str, status: str, error: str | None = None) -> Completion:
        self._handed.discard(key)
        if not self.journal.is_pending(key):
            return Completion.UNKNOWN
        self.journal.complete(key, status, error)
        return Completion.DONE

    async def claim(self, limit: int = 100, *, wait_s: float = 0.0) -> list[InboundMessage]:
        self._arrived.clear()
        fresh = [m for m in self.journal.pending() if m.key not in self._handed][:limit]
        if not fresh and wait_s > 0:
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout=wait_s)
            except TimeoutError:
                return []
            fresh = [m for m in self.journal.pending() if m.key not in self._handed][:limit]
        self._handed.update(m.key for m in fresh)
        return fresh

    async def release(self, messages: list[InboundMessage]) -> None:
        self._handed.difference_update(m.key for m in messages)
        self._arrived.set()

    async def pending(self) -> list[InboundMessage]:
        return self.journal.pending()

    async def pending_count(self) -> int:
        return self.journal.pending_count
