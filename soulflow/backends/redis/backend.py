"""The Redis backend: one client, the stores over it, and the partition leases they share."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import Redis
from redis.exceptions import AuthenticationError, RedisError, ResponseError

from soulflow.backends.base import BackendKind, BackendUnavailable
from soulflow.backends.redis.inbound import RedisInbound
from soulflow.backends.redis.keys import Keys
from soulflow.backends.redis.lease import RedisLeases
from soulflow.backends.redis.outbox import RedisOutbox
from soulflow.backends.redis.partitions import PartitionLeases
from soulflow.backends.redis.records import (
    RedisCursors,
    RedisDeadLetters,
    RedisInboundDeadLetters,
)


def shown_url(url: str) -> str:
    """The URL with any password replaced, fit for an error message or a log."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


async def connect(url: str, *, timeout_s: float = 5.0, socket_timeout_s: float = 3.0) -> Redis:
    """A client that answered PING, or BackendUnavailable with one sentence for the operator."""
    try:
        client = Redis.from_url(url, socket_connect_timeout=timeout_s,
                                socket_timeout=socket_timeout_s, health_check_interval=30)
    except ValueError as exc:
        raise BackendUnavailable(f"REDIS_URL {shown_url(url)!r} is not a Redis URL ({exc}); "
                                 "use redis://host:6379/0, rediss:// for TLS, or "
                                 "unix:///path/to/redis.sock") from None
    try:
        await asyncio.wait_for(client.ping(), timeout=timeout_s + 1)
    except AuthenticationError as exc:
        await client.aclose()
        raise BackendUnavailable(f"Redis at {shown_url(url)} refused the credentials in "
                                 f"REDIS_URL ({exc})") from None
    except (RedisError, OSError, TimeoutError) as exc:
        await client.aclose()
        reason = str(exc).split(". ")[0].rstrip(".") or type(exc).__name__
        raise BackendUnavailable(f"Redis at {shown_url(url)} (REDIS_URL) is unreachable: "
                                 f"{reason}") from None
    return client


class RedisBackend:
    """Stores on one Redis. `start()` creates the stream groups and takes this node's share of
    partitions before returning (so work can be claimed at once), then keeps the leases."""

    kind = BackendKind.REDIS

    def __init__(self, client: Redis, *, node_id: str, prefix: str = "soulflow:",
                 partitions: int = 16, lease_ttl_s: float = 6.0,
                 seen_ttl_s: float = 7 * 24 * 3600,
                 redact: Callable[[str], str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.node_id = node_id
        self.keys = Keys(prefix, partitions)
        self.leases = RedisLeases(client, self.keys)
        self.partitions = PartitionLeases(client, self.keys, self.leases, node_id,
                                          ttl_s=lease_ttl_s)
        self.inbound = RedisInbound(client, self.keys, self.partitions, seen_ttl_s=seen_ttl_s,
                                    clock=clock)
        self.outbox = RedisOutbox(client, self.keys, self.partitions, answered_ttl_s=seen_ttl_s)
        self.partitions.busy = lambda part: self.inbound.busy(part) or self.outbox.busy(part)
        self.dlq = RedisDeadLetters(client, self.keys, clock=clock)
        self.inbound_dlq = RedisInboundDeadLetters(client, self.keys, redact=redact, clock=clock)
        self.cursors = RedisCursors(client, self.keys)

    async def start(self) -> None:
        try:
            await self.inbound.ensure_groups()
            await self.partitions.rebalance()
        except ResponseError as exc:
            raise BackendUnavailable(f"Redis refused the backend's setup ({exc}); SoulFlow "
                                     "needs Redis 6.2 or newer with scripting allowed") from None
        self.partitions.start()

    async def close(self) -> None:
        await self.partitions.stop()
        await self.client.aclose()
