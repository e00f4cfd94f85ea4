"""The file backend: the embedded default, the existing journal classes behind the protocols.

The file classes are synchronous and fast (an append to a buffered file); these adapters only
give them the asynchronous shape of `base.py`. One daemon owns a workspace (`runtime/daemon.lock`),
so leases here are an in-memory table: they keep the contract (fencing tokens grow, one holder at a
time) for code that runs on either backend, and cost nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from soulflow.backends.base import BackendKind, Completion, Lease
from soulflow.bus.dlq import DeadLetter, DeadLetterQueue
from soulflow.bus.inbound import InboundJournal
from soulflow.bus.inbound_dlq import InboundDeadLetter, InboundDeadLetters, IntakeStage
from soulflow.bus.messages import InboundMessage, OutboundMessage
from soulflow.bus.outbox import Outbox, OutboxEntry
from soulflow.storage.atomic import read_json, write_json_atomic
from soulflow.storage.jsonl import RecordLog

R = TypeVar("R")


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


class FileOutbox:
    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    async def put(self, message: OutboundMessage) -> bool:
        return self.outbox.put(message)

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


class FileCursors:
    """One JSON object per channel, `runtime/bus/cursors/<channel>.json`: the file and format
    of `channels/state.py`'s ChannelState (which the adapters use directly today), replaced
    atomically on every update."""

    def __init__(self, directory: Path, leases: MemoryLeases) -> None:
        self.directory = directory
        self._leases = leases
        self._cache: dict[str, dict[str, Any]] = {}

    def _data(self, channel: str) -> dict[str, Any]:
        if channel not in self._cache:
            data = read_json(self.directory / f"{channel}.json", {})
            self._cache[channel] = data if isinstance(data, dict) else {}
        return self._cache[channel]

    async def load(self, channel: str) -> dict[str, Any]:
        return dict(self._data(channel))

    async def update(self, channel: str, values: dict[str, Any], *,
                     lease: Lease | None = None) -> bool:
        if lease is not None and not self._leases.is_current(lease):
            return False
        data = self._data(channel)
        changed = {k: v for k, v in values.items() if data.get(k) != v}
        if changed:
            data.update(changed)
            write_json_atomic(self.directory / f"{channel}.json", data)
        return True


@dataclass(slots=True)
class _Held:
    owner: str
    token: int
    expires: float


@dataclass(slots=True)
class MemoryLeases:
    """Leases for one process (the file backend's single daemon)."""

    clock: Callable[[], float] = time.monotonic
    _held: dict[str, _Held] = field(default_factory=dict)
    _fences: dict[str, int] = field(default_factory=dict)

    def _current(self, name: str) -> _Held | None:
        held = self._held.get(name)
        if held is not None and held.expires <= self.clock():
            del self._held[name]
            return None
        return held

    def is_current(self, lease: Lease) -> bool:
        held = self._current(lease.name)
        return held is not None and (held.owner, held.token) == (lease.owner, lease.token)

    async def acquire(self, name: str, owner: str, ttl_s: float) -> Lease | None:
        if self._current(name) is not None:
            return None
        token = self._fences.get(name, 0) + 1
        self._fences[name] = token
        now = self.clock()
        self._held[name] = _Held(owner, token, now + ttl_s)
        return Lease(name, owner, token, now + ttl_s * 2 / 3)

    async def renew(self, lease: Lease, ttl_s: float) -> Lease | None:
        if not self.is_current(lease):
            return None
        held = self._held[lease.name]
        now = self.clock()
        held.expires = now + ttl_s
        return Lease(lease.name, lease.owner, lease.token, now + ttl_s * 2 / 3)

    async def release(self, lease: Lease) -> bool:
        if not self.is_current(lease):
            return False
        del self._held[lease.name]
        return True

    async def holder(self, name: str) -> tuple[str, int] | None:
        held = self._current(name)
        return None if held is None else (held.owner, held.token)


class FileBackend:
    """The journals under `runtime/bus/` and `runtime/dlq/`, as the data map lists them."""

    kind = BackendKind.FILE

    def __init__(self, runtime_dir: Path, *, node_id: str, fsync: str = "interval",
                 seen_ttl_s: float = 7 * 24 * 3600,
                 redact: Callable[[str], str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.node_id = node_id
        self.inbound = FileInbound(InboundJournal(runtime_dir / "bus" / "inbound.jsonl",
                                                  fsync=fsync, seen_ttl_s=seen_ttl_s,
                                                  clock=clock))
        self.outbox = FileOutbox(Outbox(runtime_dir / "bus" / "outbox.jsonl", fsync=fsync,
                                        clock=clock))
        self.dlq = FileDeadLetters(DeadLetterQueue(runtime_dir / "dlq" / "outbound.jsonl",
                                                   clock=clock))
        self.inbound_dlq = FileInboundDeadLetters(InboundDeadLetters(
            runtime_dir / "dlq" / "inbound.jsonl", redact=redact, clock=clock))
        self.leases = MemoryLeases()
        self.cursors = FileCursors(runtime_dir / "bus" / "cursors", self.leases)

    async def start(self) -> None:
        """Nothing to connect: the files were loaded when the backend was built."""

    def owns(self, chat_key: str) -> bool:
        """One daemon per workspace: every chat is this node's."""
        return True

    def on_partitions_changed(self, callback: Callable[[], None]) -> None:
        """Ownership never changes here, so the callback is never called."""

    def status(self) -> dict[str, Any]:
        return {"kind": str(self.kind), "node_id": self.node_id, "connected": True,
                "since": None, "last_error": "", "partitions": None}

    def sync(self) -> None:
        self.inbound.journal.sync()
        self.outbox.outbox.sync()

    def compact_if_needed(self) -> None:
        journal, outbox = self.inbound.journal, self.outbox.outbox
        if journal.needs_compaction:
            journal.compact()
        if outbox.needs_compaction:
            outbox.compact()

    async def close(self) -> None:
        self.inbound.journal.close()
        self.outbox.outbox.close()
        self.dlq.dlq.close()
        self.inbound_dlq.letters.close()
