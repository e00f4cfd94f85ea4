"""A synchronous Redis client for the stores whose API is synchronous.

Sessions, agent run journals, the approvals map, cron, tasks, decisions and the vault are called
deep inside the agent, synchronously, many times per turn. On a running node a turn's calls do
not reach this client: the hot stores write behind and read ahead on the asynchronous one
(writeback.py), and the services' loops run their calls in the backend's store thread
(`RedisBackend.offload`). What still calls it on the event loop (an operator's command, the
dashboard's state, a store without the writer) costs one round trip (about 0.1 ms on a LAN);
the short timeouts bound what a dead or unreachable Redis costs: at most
`timeout_s` per call, and then the call raises `StoreUnavailable` (the client maps every Redis
error where it enters, redis/errors.py), which the caller treats as the store being away (the
turn is given back, the message stays pending in Redis and is run again).

A dead Redis must not cost that timeout over and over: the calls of one turn, of the cron and
task loops, come one after the other on the event loop, and together they would freeze it past
the lease deadline (the node would go on acting on leases that have run out). So the client has
a breaker (`cooldown_s`): once a call fails on the network, every call fails at once, without
touching the network, until the cooldown has passed; then one call tries again. Redis away
costs the loop one timeout per cooldown.

`StateRedis` carries the client and the key prefix together, so a store needs one argument.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from redis.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from soulflow.backends.base import BackendUnavailable
from soulflow.backends.redis.clients import SyncStoreRedis

_NETWORK_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)


@dataclass(slots=True)
class Breaker:
    """Fail fast while Redis is known not to answer (see the module's docstring)."""

    cooldown_s: float
    clock: Callable[[], float] = time.monotonic
    open_until: float = field(default=0.0, init=False)

    def check(self) -> None:
        """Raise at once while open: the caller sees `StoreUnavailable` (mapped from this
        ConnectionError by the client), as from a call that went to the network and failed."""
        if self.clock() < self.open_until:
            raise RedisConnectionError("Redis did not answer a moment ago; not trying again "
                                       f"for up to {self.cooldown_s:g} s")

    def failed(self) -> None:
        self.open_until = self.clock() + self.cooldown_s

    def answered(self) -> None:
        self.open_until = 0.0


def _guarded(base: type[AbstractConnection], breaker: Breaker) -> type[AbstractConnection]:
    """`base` (TCP, TLS or unix socket: whatever the URL chose) with the breaker around its
    network calls; pipelines and scripts go through the same two calls."""

    class Guarded(base):  # type: ignore[misc, valid-type]
        def connect(self) -> None:
            breaker.check()
            try:
                super().connect()
            except _NETWORK_ERRORS:
                breaker.failed()
                raise

        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            breaker.check()
            try:
                super().send_packed_command(command, check_health)
            except _NETWORK_ERRORS:
                breaker.failed()
                raise

        def read_response(self, *args: Any, **kwargs: Any) -> Any:
            try:
                response = super().read_response(*args, **kwargs)
            except _NETWORK_ERRORS:
                breaker.failed()
                raise
            except RedisError:  # Redis answered, with an error of the command's own
                breaker.answered()
                raise
            breaker.answered()
            return response

    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{base.__name__}"
    return Guarded


def sync_client(url: str, *, timeout_s: float = 2.0, cooldown_s: float | None = None,
                clock: Callable[[], float] = time.monotonic) -> SyncStoreRedis:
    """A client for `url` (not yet connected: redis-py connects on the first command).

    `timeout_s` bounds connecting and each reply; `health_check_interval` re-checks a pooled
    connection that sat idle, so a Redis restart costs one failed call at most, not a hang.
    With `cooldown_s`, a network failure makes every call fail at once for that long."""
    try:
        client = SyncStoreRedis.from_url(url, socket_connect_timeout=timeout_s,
                                         socket_timeout=timeout_s, health_check_interval=30,
                                         retry_on_timeout=False)
    except ValueError as exc:
        raise BackendUnavailable(f"REDIS_URL is not a Redis URL ({exc}); use "
                                 "redis://host:6379/0, rediss:// for TLS, or "
                                 "unix:///path/to/redis.sock") from None
    if cooldown_s is not None:
        pool = client.connection_pool
        pool.connection_class = _guarded(pool.connection_class, Breaker(cooldown_s, clock))
    return client


def text(value: bytes | str) -> str:
    """A reply of this client (bytes) as str, for the service stores (cron, decisions, vault,
    heartbeat): bytes that are not UTF-8 read as U+FFFD, so one bad field fails no read."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


@dataclass(frozen=True, slots=True)
class StateRedis:
    """The synchronous client and the key prefix (`REDIS_KEY_PREFIX`) of one daemon; the keys
    themselves are named in keys.py (`AgentKeys`, `ServiceKeys`, `TaskKeys`)."""

    client: SyncStoreRedis
    prefix: str

    def close(self) -> None:
        self.client.close()
