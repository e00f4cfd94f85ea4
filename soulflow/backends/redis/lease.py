"""Leases with fencing tokens on Redis: `SET PX` guarded by Lua compare-and-set, an `INCR`
counter for the tokens.

The local deadline is what keeps a node that lost Redis from acting after another node took
over: it is measured from *before* the request was sent, and ends a third of the TTL before
the key can expire in Redis. A node that cannot renew in time therefore stops (its `Lease.valid()`
turns False) while the lease is still held in Redis, and nobody else can have it yet.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from soulflow.backends.base import Lease
from soulflow.backends.redis import scripts
from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.keys import Keys

SAFETY_FRACTION = 1 / 3  # of the TTL: the margin between our deadline and Redis's expiry


def local_deadline(sent_at: float, ttl_s: float) -> float:
    return sent_at + ttl_s * (1 - SAFETY_FRACTION)


class RedisLeases:
    def __init__(self, client: AsyncStoreRedis, keys: Keys, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._keys = keys
        self._clock = clock
        self._acquire = client.register_script(scripts.LEASE_ACQUIRE)
        self._take_over = client.register_script(scripts.LEASE_TAKE_OVER)
        self._renew = client.register_script(scripts.LEASE_RENEW)
        self._release = client.register_script(scripts.LEASE_RELEASE)

    async def acquire(self, name: str, owner: str, ttl_s: float) -> Lease | None:
        if "|" in owner:
            raise ValueError("a lease owner cannot contain '|'")
        sent_at = self._clock()
        token = await self._acquire(keys=[self._keys.lease(name), self._keys.fence(name)],
                                    args=[owner, _ms(ttl_s)])
        if token is None:
            return None
        return Lease(name, owner, int(token), local_deadline(sent_at, ttl_s))

    async def take_over(self, name: str, owner: str, ttl_s: float) -> Lease:
        """Take a lease whatever holds it, with a new token (writes fenced by an older one are
        refused). Only for a lease owned by name: a node's private partition, which a node
        restarted with the same id takes back from its previous life without waiting a TTL."""
        if "|" in owner:
            raise ValueError("a lease owner cannot contain '|'")
        sent_at = self._clock()
        token = await self._take_over(keys=[self._keys.lease(name), self._keys.fence(name)],
                                      args=[owner, _ms(ttl_s)])
        return Lease(name, owner, int(token), local_deadline(sent_at, ttl_s))

    async def renew(self, lease: Lease, ttl_s: float) -> Lease | None:
        sent_at = self._clock()
        ok = await self._renew(keys=[self._keys.lease(lease.name)], args=[lease.value, _ms(ttl_s)])
        if not ok:
            return None
        return Lease(lease.name, lease.owner, lease.token, local_deadline(sent_at, ttl_s))

    async def release(self, lease: Lease) -> bool:
        return bool(await self._release(keys=[self._keys.lease(lease.name)], args=[lease.value]))

    async def holder(self, name: str) -> tuple[str, int] | None:
        value = await self._client.get(self._keys.lease(name))
        if value is None:
            return None
        owner, _, token = _text(value).rpartition("|")
        return owner, int(token)


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
