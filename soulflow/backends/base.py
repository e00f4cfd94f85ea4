"""The durable parts of the bus as backend protocols: one contract, a file and a Redis backend.

These protocols are taken from the public API of the file journals (`file/inbound.py`,
`file/outbox.py`, `file/dead_letters.py`, `channels/state.py`), made asynchronous because a
shared backend answers over the network. Two things the single-process file classes
never needed are added, because several nodes share one workload:

- `InboundStore.claim()`: the work this node may run now. Each accepted message is handed out
  once (to one node) until it is completed or its holder dies; a chat's messages come out in
  the order they were accepted.
- `LeaseStore`: named leases with fencing tokens, for "exactly one node reads this platform
  account" and "exactly one node works on this partition of chats".

`tests/backends/` runs one contract suite against every implementation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from soulflow.config import ConfigError
from soulflow.contracts import (
    DeadLetter,
    InboundDeadLetter,
    InboundMessage,
    IntakeStage,
    OutboundMessage,
    OutboxEntry,
)


class BackendKind(StrEnum):
    FILE = "file"
    REDIS = "redis"


class BackendUnavailable(ConfigError):
    """The configured backend cannot be reached at boot; the message is one sentence for the
    operator (a ConfigError, so `soulflow run` prints it and exits with a failure status)."""


class Completion(StrEnum):
    """How `InboundStore.complete()` ended."""

    DONE = "done"  # recorded: the message will not be handed out again
    UNKNOWN = "unknown"  # not pending (already completed, or never accepted)
    FENCED = "fenced"  # this node lost the lease it claimed the message under; the new holder
    #                    runs it again (see docs/scaling.md, "the duplicate window")


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease held by `owner`. `token` is the fencing token: it grows with every acquisition
    of the same name, so a write carrying an older token can be refused. `deadline` is this
    node's own (monotonic) view of when the lease stops being safe to act on; it falls before
    the lease can expire in the store, so a node cut off from the store stops first."""

    name: str
    owner: str
    token: int
    deadline: float

    @property
    def value(self) -> str:
        """What the store holds under the lease's key while it is held."""
        return f"{self.owner}|{self.token}"

    def valid(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) < self.deadline


class LeaseStore(Protocol):
    async def acquire(self, name: str, owner: str, ttl_s: float) -> Lease | None:
        """Take the lease if nobody holds it; None if someone (anyone, even `owner` from an
        earlier life) still does."""

    async def renew(self, lease: Lease, ttl_s: float) -> Lease | None:
        """Extend a lease we still hold (same owner and token); None if it was lost."""

    async def release(self, lease: Lease) -> bool:
        """Give the lease up if we still hold it (a clean stop hands over at once)."""

    async def holder(self, name: str) -> tuple[str, int] | None:
        """(owner, token) of the current holder, or None."""


class InboundStore(Protocol):
    async def accept(self, message: InboundMessage) -> bool:
        """Journal a new message; False (and nothing written) if it was seen before."""

    async def is_seen(self, key: str) -> bool: ...

    async def mark_seen(self, keys: list[str]) -> None:
        """Record ids that must never be answered (history primed on a first read)."""

    async def complete(self, key: str, status: str, error: str | None = None) -> Completion:
        """Mark a message answered, refused/ignored, or failed; it is never handed out again."""

    async def claim(self, limit: int = 100, *, wait_s: float = 0.0) -> list[InboundMessage]:
        """Messages this node should run now, each handed out once; per chat in accept order.
        With `wait_s`, when there is nothing yet, wait up to that long for a message to arrive
        (keep it under the Redis socket timeout, half a lease TTL)."""

    async def release(self, messages: list[InboundMessage]) -> None:
        """Give claimed messages back, to be handed out again (first, in order): their turn
        failed in a way that could not be recorded (the store went away mid-turn). Local to
        this node: it never fails; a message of a partition lost meanwhile is left to the
        partition's new holder."""

    async def pending(self) -> list[InboundMessage]:
        """Every unfinished message (all nodes'), oldest first."""

    async def pending_count(self) -> int: ...


class OutboxStore(Protocol):
    async def put(self, message: OutboundMessage) -> bool:
        """Store a message for delivery; False if an entry with its id is already pending."""

    async def has_answered(self, inbound_key: str) -> bool:
        """True if a reply to this inbound message was already queued (perhaps sent)."""

    async def record_sending(self, message_id: str) -> bool:
        """Note that a send starts (if the node dies before reporting back, the platform may
        have the message). False: do not send it, here and now: the entry is gone, or its
        chat's partition is no longer this node's (a `pending()` list can go stale)."""

    async def record_attempt(self, message_id: str, attempts: int, next_at: float,
                             error: str) -> None: ...

    async def mark_sent(self, message_id: str, platform_ids: list[str] | None = None) -> None: ...

    async def mark_dead(self, message_id: str) -> None: ...

    async def get(self, message_id: str) -> OutboxEntry | None: ...

    async def pending(self) -> list[OutboxEntry]:
        """Entries this node is responsible for sending, per chat in insertion order."""

    async def count(self) -> int:
        """Pending entries in the whole store (every node's)."""


class DeadLetterStore(Protocol):
    async def add(self, message: OutboundMessage, *, retry_count: int,
                  error: str) -> DeadLetter: ...

    async def entries(self) -> list[DeadLetter]: ...

    async def recent(self, limit: int = 20) -> list[DeadLetter]:
        """The last `limit` letters, oldest first, without reading the whole queue."""

    async def remove(self, message_ids: Iterable[str]) -> int: ...

    async def purge(self) -> int: ...

    async def count(self) -> int: ...


class InboundDeadLetterStore(Protocol):
    async def add(self, *, provider: str, chat_id: str, message_id: str, sender_id: str,
                  stage: IntakeStage | str, error: str, content: str = "", raw: str = "",
                  key: str = "") -> InboundDeadLetter:
        """Record one message, redacted; raises if it cannot be stored."""

    async def entries(self) -> list[InboundDeadLetter]: ...

    async def recent(self, limit: int = 20) -> list[InboundDeadLetter]: ...

    async def purge(self) -> int: ...

    async def count(self) -> int: ...


class CursorStore(Protocol):
    async def load(self, channel: str) -> dict[str, Any]:
        """The channel's persisted cursors, offsets and flags."""

    async def update(self, channel: str, values: dict[str, Any], *,
                     lease: Lease | None = None) -> bool:
        """Set several values at once. With `lease`, only while that lease is still the
        current one (a deposed reader cannot move the cursor); False if refused."""


class Backend(Protocol):
    """Everything durable the bus needs, from one backend."""

    kind: BackendKind
    node_id: str
    inbound: InboundStore
    outbox: OutboxStore
    dlq: DeadLetterStore
    inbound_dlq: InboundDeadLetterStore
    cursors: CursorStore
    leases: LeaseStore

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def owns(self, chat_key: str) -> bool:
        """True while this node may run the chat's work (`provider:chat_id`): it holds the
        chat's partition. State of a chat read by a node is only trusted while this holds."""

    def on_partitions_changed(self, callback: Callable[[], None]) -> None:
        """Call `callback` (in the event loop) after the set of chats this node owns changed:
        a rebalance took or gave back partitions, or a lease lapsed. Never on the file backend."""

    def status(self) -> dict[str, Any]:
        """For /api/state and the page: kind, node id, whether the store answers (and since
        when not), the last error (no credentials), partitions held / total."""

    def sync(self) -> None:
        """Flush buffered writes to disk (file backend; safe from a worker thread)."""

    def compact_if_needed(self) -> None:
        """Rewrite journals that have grown (file backend; call from the event loop)."""
