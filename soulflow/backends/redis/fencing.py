"""Which partition lease this node holds a chat under: the token a store's write carries (the
run journal refuses an older holder's write with it) and checks its cache against (a cache
filled under a token is current while that lease is still held: nobody else can write the
chat's records meanwhile)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from soulflow.backends.base import Lease

Fence = Callable[[str], int | None]  # chat key → this node's partition lease token, or None


def no_fence(chat_key: str) -> int | None:
    """Before the backend is open (and in tests of one node): this node holds no lease."""
    return None


class ChatLeases(Protocol):
    """What `partition_fence` reads from a `RedisBackend` (declared here, so this module
    need not import the backend that imports it)."""

    def chat_lease(self, chat_key: str) -> Lease | None: ...


def partition_fence(backend: ChatLeases) -> Fence:
    """The fencing token of the partition lease under which this node holds a chat, while the
    lease is safe to act on (`PartitionLeases.lease`), else None."""
    def token(chat_key: str) -> int | None:
        lease = backend.chat_lease(chat_key)
        return lease.token if lease is not None else None
    return token
