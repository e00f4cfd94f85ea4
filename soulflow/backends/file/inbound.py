"""The inbound journal on files: a message is written here before its channel cursor moves.

`runtime/bus/inbound.jsonl`. Records: `{"op":"in","msg":{…}}` when a message is accepted,
`{"op":"done","key","status"}` when it has been answered or its failure recorded, and
`{"op":"seen","key","at"}` for an id taken in without a message (history primed on a first
read, a quarantined message). Whatever is `in` but not `done` at boot is work the previous
process did not finish: the journal is the source of truth for pending messages.

The ids seen within the redelivery window (`SEEN_WINDOW_S`) live on disk, in
`runtime/bus/inbound-seen.sqlite3` (`storage/keyset.py`), not in RAM. How the two files stay
crash-safe together:

- `accept` appends the `in` record first, then adds the id to the set: a crash between the two
  leaves the record, and the next start adds every id the journal names to the set again. The
  set can never know an id the journal lost, so a message is never rejected as seen unless it
  was journaled (never lost); and every journaled id is in the set after a start (never
  answered twice).
- Compaction drops the records of finished messages only after the set is checkpointed (every
  id durable in SQLite), so no id is ever only in a file that is about to be rewritten.
- An older journal's `seen` records (compaction used to carry every seen id over) are moved
  into the set on the first start, the same way; compaction then leaves them out.

`InboundJournal` is the file; `FileInbound` is the store over it (`base.InboundStore`): the
journal plus the hand-out bookkeeping of `claim()`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from soulflow.backends.base import SEEN_WINDOW_S, Completion
from soulflow.contracts import InboundMessage, ReplyStatus
from soulflow.storage.jsonl import JsonlFile
from soulflow.storage.keyset import EXPIRE_BATCH, ExpiringKeys

log = logging.getLogger(__name__)

COMPACT_AFTER = 10_000  # records appended before the journal is rewritten (pending only)
EXPIRE_EVERY_S = 60.0  # how often sync() deletes the ids past the window
# Batches of EXPIRE_BATCH ids deleted per expiry, at most (100,000 ids a minute): far above
# the steady inflow (1,200 a minute at 20 msg/s), so a backlog drains in minutes, e.g. the
# previous run's ids, all due at once when their hold after a start ends (3.5 million at
# 20 msg/s: 35 minutes; one batch a minute took 11 hours, and fell behind above 83 msg/s).
EXPIRE_BATCHES = 20


def seen_path(journal_path: Path) -> Path:
    """Where the seen ids of the journal at `journal_path` live."""
    return journal_path.with_name(journal_path.stem + "-seen.sqlite3")


class InboundJournal:
    """Durable record of accepted inbound messages and their completion, with the seen ids of
    the redelivery window beside it on disk."""

    def __init__(
        self,
        path: Path,
        *,
        fsync: str = "interval",
        seen_ttl_s: float = SEEN_WINDOW_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._file = JsonlFile(path, fsync=fsync)
        self._clock = clock
        self._seen = ExpiringKeys(seen_path(path), window_s=seen_ttl_s, clock=clock)
        self._pending: dict[str, InboundMessage] = {}
        self._records_since_compaction = 0
        self._expired_at = 0.0
        self._load()

    def _load(self) -> None:
        ids: list[tuple[str, float]] = []
        for record in self._file.iter_records():
            op, key = record.get("op"), record.get("key")
            if op == "in" and isinstance(record.get("msg"), dict):
                try:
                    message = InboundMessage.from_dict(record["msg"])
                except TypeError as exc:
                    log.warning("inbound journal: skipped a malformed record (%s)", exc)
                    continue
                ids.append((message.key, float(record.get("at", message.received_at))))
                self._pending[message.key] = message
            elif op == "done" and isinstance(key, str):
                self._pending.pop(key, None)
            elif op == "seen" and isinstance(key, str):
                ids.append((key, float(record.get("at", 0.0))))
        self._seen.add_many(ids)  # a crash may have left them out; an old journal's, moved
        self.compact()

    def is_seen(self, key: str) -> bool:
        return key in self._pending or key in self._seen

    def accept(self, message: InboundMessage) -> bool:
        """Journal a new message; False (and nothing written) if it was seen before."""
        if self.is_seen(message.key):
            return False
        now = self._clock()
        self._file.append({"op": "in", "at": now, "msg": message.to_dict()})
        self._pending[message.key] = message
        self._seen.add(message.key, now)
        self._records_since_compaction += 1
        return True

    def mark_seen(self, keys: list[str]) -> None:
        """Record ids that must never be answered (history primed on a first read)."""
        fresh = [k for k in dict.fromkeys(keys) if not self.is_seen(k)]
        if not fresh:
            return
        now = self._clock()
        self._file.append_many({"op": "seen", "key": k, "at": now} for k in fresh)
        self._seen.add_many((k, now) for k in fresh)
        self._records_since_compaction += len(fresh)

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
    def seen_count(self) -> int:
        """Ids in the window (a COUNT over the table: for tests and benches, not hot paths)."""
        return len(self._seen)

    @property
    def needs_compaction(self) -> bool:
        return self._records_since_compaction > max(COMPACT_AFTER, 2 * len(self._pending))

    def compact(self) -> None:
        """Rewrite the file as the pending messages only, once every id it names is durable
        in the seen set (else keep the file as it is and try again later)."""
        if not self._seen.checkpoint():
            log.warning("inbound journal: the seen-id store is busy; compaction postponed")
            return
        self._file.rewrite({"op": "in", "at": m.received_at, "msg": m.to_dict()}
                           for m in self.pending())
        self._records_since_compaction = 0

    def expire_seen(self, batches: int = EXPIRE_BATCHES) -> int:
        """Forget ids past the window, a batch at a time (the set's lock is free between
        batches), until one comes back short or after `batches`; pending ones are known from
        the journal whatever the set says."""
        removed = 0
        for _ in range(batches):
            step = self._seen.expire()
            removed += step
            if step < EXPIRE_BATCH:
                break
        return removed

    def sync(self) -> None:
        """Flush the journal and commit the seen ids (from a worker thread); once a minute,
        expire the ids past the window."""
        self._file.sync()
        now = time.monotonic()
        if now - self._expired_at >= EXPIRE_EVERY_S:
            self._expired_at = now
            self.expire_seen()
        self._seen.commit()

    def close(self) -> None:
        self._file.close()
        self._seen.close()


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

    def first_delivery(self, key: str) -> bool:
        """Never claimed to be: the answered check is a lookup in memory here."""
        return False

    async def pending(self) -> list[InboundMessage]:
        return self.journal.pending()

    async def pending_count(self) -> int:
        return self.journal.pending_count
