"""A synchronous Redis client for the stores whose API is synchronous.

Sessions, agent run journals, the approvals map, cron, tasks, decisions and the vault are called
deep inside the agent, synchronously, many times per turn; their Redis implementations use this
client instead of making the whole agent asynchronous. A call is one round trip (about 0.1 ms on
a LAN); the short timeouts bound what a dead or unreachable Redis costs the event loop: at most
`timeout_s` per call, and then the call raises `redis.exceptions.ConnectionError` or
`TimeoutError`, which the caller treats as any store failure (the turn fails, the message stays
pending in Redis and is run again).

`StateRedis` carries the client and the key prefix together, so a store needs one argument.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis import Redis

from soulflow.backends.base import BackendUnavailable


def sync_client(url: str, *, timeout_s: float = 2.0) -> Redis:
    """A client for `url` (not yet connected: redis-py connects on the first command).

    `timeout_s` bounds connecting and each reply; `health_check_interval` re-checks a pooled
    connection that sat idle, so a Redis restart costs one failed call at most, not a hang."""
    try:
        return Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s,
                              health_check_interval=30, retry_on_timeout=False)
    except ValueError as exc:
        raise BackendUnavailable(f"REDIS_URL is not a Redis URL ({exc}); use "
                                 "redis://host:6379/0, rediss:// for TLS, or "
                                 "unix:///path/to/redis.sock") from None


@dataclass(frozen=True, slots=True)
class StateRedis:
    """The synchronous client and the key prefix (`REDIS_KEY_PREFIX`) of one daemon."""

    client: Redis
    prefix: str

    def key(self, *parts: str) -> str:
        """`<prefix>part1:part2:…`: every key a sync store writes is built here."""
        return self.prefix + ":".join(parts)

    def close(self) -> None:
        self.client.close()
