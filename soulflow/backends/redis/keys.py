"""Key names of the Redis backend, in one place (docs/scaling.md lists them for operators).

Every key starts with the configured prefix (`REDIS_KEY_PREFIX`, default `soulflow:`), so
several bots can share one Redis and a test can use a fresh namespace.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

GROUP = "workers"  # the consumer group of every inbound stream


def partition_of(chat_key: str, partitions: int) -> int:
    """The partition of a chat (`provider:chat_id`). CRC32 is stable across processes and
    Python versions (the built-in hash() is salted per process)."""
    return zlib.crc32(chat_key.encode("utf-8", "surrogatepass")) % partitions


@dataclass(frozen=True, slots=True)
class Keys:
    prefix: str
    partitions: int

    def stream(self, part: int) -> str:
        """Inbound stream of one partition of chats (consumer group `workers`)."""
        return f"{self.prefix}in:{part}"

    @property
    def inbound_pending(self) -> str:
        """Hash: inbound key → `part|entry id|message json`, until completed."""
        return f"{self.prefix}in:pending"

    def seen(self, key: str) -> str:
        """String with a TTL: the message id was taken in (or primed) and must not be again."""
        return f"{self.prefix}seen:{key}"

    def lease(self, name: str) -> str:
        """String `owner|token` with a TTL while the lease is held."""
        return f"{self.prefix}lease:{name}"

    def fence(self, name: str) -> str:
        """Counter: the last fencing token handed out for a lease name (never expires)."""
        return f"{self.prefix}fence:{name}"

    @staticmethod
    def partition_lease(part: int) -> str:
        return f"part:{part}"

    @property
    def nodes(self) -> str:
        """Sorted set: node id → the server time (ms) until which it counts as alive."""
        return f"{self.prefix}nodes"

    @property
    def outbox_messages(self) -> str:
        """Hash: outbound message id → message json (written once)."""
        return f"{self.prefix}out:msg"

    @property
    def outbox_state(self) -> str:
        """Hash: outbound message id → `attempts|next_at|in_flight|last error`."""
        return f"{self.prefix}out:state"

    def outbox_order(self, part: int) -> str:
        """Sorted set: outbound message ids of one partition, scored by insertion sequence."""
        return f"{self.prefix}out:part:{part}"

    @property
    def outbox_sequence(self) -> str:
        return f"{self.prefix}out:seq"

    def answered(self, inbound_key: str) -> str:
        """String with a TTL: a reply to this inbound message was queued."""
        return f"{self.prefix}answered:{inbound_key}"

    @property
    def dlq_outbound(self) -> str:
        return f"{self.prefix}dlq:outbound"

    @property
    def dlq_inbound(self) -> str:
        return f"{self.prefix}dlq:inbound"

    def cursors(self, channel: str) -> str:
        """Hash: cursor name → json value, for one channel (account)."""
        return f"{self.prefix}cursors:{channel}"
