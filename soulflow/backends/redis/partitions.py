"""Which partitions of chats this node works on: one lease per partition, a fair share each.

Chats are spread over `REDIS_PARTITIONS` partitions (CRC32 of `provider:chat_id`). A node works
on a partition only while it holds the partition's lease, so a chat's messages are run by one
node at a time, in order, and its replies are sent by that node. Every node beats in a sorted set
of live nodes and aims for `ceil(partitions / live nodes)` leases: it takes free ones up to its
share and gives back surplus ones that have no work in hand, so a node that joins gets work and
a node that dies leaves its partitions to expire and be taken (then `XAUTOCLAIM` moves its
unfinished entries to the new holder).

Besides, each node holds its private partition (`node:<node id>`, keys.py): its own local chats,
which no other node may run or answer. Nobody else competes for it; a node restarted with the
same id takes it over at once with a new fencing token (its previous life's writes are then
refused), and it never counts in the share.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable

from soulflow.backends.base import Lease
from soulflow.backends.redis import scripts
from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.keys import Keys, Part, private_part
from soulflow.backends.redis.lease import RedisLeases
from soulflow.errors import StoreError

log = logging.getLogger(__name__)


class PartitionLeases:
    def __init__(self, client: AsyncStoreRedis, keys: Keys, leases: RedisLeases, node_id: str, *,
                 ttl_s: float, clock: Callable[[], float] = time.monotonic,
                 on_taken: Callable[[], None] = lambda: None) -> None:
        """`on_taken` is called the moment a shared partition is acquired, before the round
        goes on: whoever must act before this node works on a chat it takes over (the
        dispatcher holds sends until the dead node's queued replies are read) hears of it
        before any other task can see the partition held."""
        self._keys = keys
        self._leases = leases
        self.node_id = node_id
        self.ttl_s = ttl_s
        self._clock = clock
        self._on_taken = on_taken
        self._beat = client.register_script(scripts.NODES_BEAT)
        self._held: dict[int, Lease] = {}
        self._fresh: set[Part] = set()  # acquired, unfinished entries not yet reclaimed
        self.busy: Callable[[int], bool] = lambda part: False  # set by the inbound store
        # a read of the partition's stream is waiting (set by the inbound store)
        self.reading: Callable[[int], bool] = lambda part: False
        self._leaving: set[int] = set()  # surplus, not read any more, released next round
        self.private = private_part(node_id)
        self._private: Lease | None = None
        self._private_taken = False  # taken over once (at start); after, acquired when free
        # the first partition this node tries: spreads nodes over the ring at startup
        self._offset = sum(node_id.encode()) % keys.partitions

    def lease(self, part: Part) -> Lease | None:
        """The lease of a partition while it is safe to act on, else None (another node's
        private partition: always None)."""
        if isinstance(part, str):
            lease = self._private if part == self.private else None
        else:
            lease = self._held.get(part)
        return lease if lease is not None and lease.valid(self._clock()) else None

    def held(self) -> list[int]:
        now = self._clock()
        return sorted(p for p, lease in self._held.items() if lease.valid(now))

    def worked(self) -> list[Part]:
        """Every partition this node may act on: the shared ones held, then its private one."""
        parts: list[Part] = list(self.held())
        if self.lease(self.private) is not None:
            parts.append(self.private)
        return parts

    def fresh(self) -> list[Part]:
        """Partitions acquired whose orphaned entries were not reclaimed yet."""
        return [p for p in self.worked() if p in self._fresh]

    def reclaimed(self, part: Part) -> None:
        self._fresh.discard(part)

    async def _keep_private(self) -> None:
        """Renew the private partition's lease; take it over at start (from this node's
        previous life), later only when free (a second process with the same id keeps it)."""
        if self._private is not None:
            renewed = await self._leases.renew(self._private, self.ttl_s)
            if renewed is not None and self._private.valid(self._clock()):
                self._private = renewed
                return
            log.warning("private partition %s: lease lost", self.private)
            self._private = None
            self._fresh.discard(self.private)
        name = Keys.partition_lease(self.private)
        if not self._private_taken:
            self._private = await self._leases.take_over(name, self.node_id, self.ttl_s)
            self._private_taken = True
        else:
            self._private = await self._leases.acquire(name, self.node_id, self.ttl_s)
        if self._private is not None:
            self._fresh.add(self.private)

    async def rebalance(self) -> None:
        """One round: beat, renew what we hold, take our share, give back the surplus."""
        live = int(await self._beat(keys=[self._keys.nodes],
                                    args=[self.node_id, int(self.ttl_s * 1000)]))
        await self._keep_private()
        share = math.ceil(self._keys.partitions / max(1, live))
        # all at once: one round trip, not one per partition (a Redis far away, or slow,
        # must not make the round outlast the leases it renews)
        held = list(self._held.items())
        results = await asyncio.gather(*(self._leases.renew(lease, self.ttl_s)
                                         for _, lease in held), return_exceptions=True)
        failure: BaseException | None = None
        for (part, lease), renewed in zip(held, results, strict=True):
            if isinstance(renewed, BaseException):
                failure = failure or renewed  # kept until its deadline, as without a round
                continue
            if renewed is None or not lease.valid(self._clock()):
                log.warning("partition %d: lease lost (node %s)", part, self.node_id)
                del self._held[part]
                self._fresh.discard(part)
            else:
                self._held[part] = renewed
        if failure is not None:
            raise failure
        parts = self._keys.partitions
        for step in range(parts):
            if len(self._held) >= share:
                break
            part = (self._offset + step) % parts
            if part in self._held:
                continue
            lease = await self._leases.acquire(Keys.partition_lease(part), self.node_id,
                                               self.ttl_s)
            if lease is not None:
                self._held[part] = lease
                self._fresh.add(part)
                self._on_taken()
        await self._give_back(len(self._held) - share)

    async def _give_back(self, surplus: int) -> None:
        """Give back `surplus` partitions without work in hand, in two rounds: first the
        partition is marked leaving (this node stops reading its stream, though it still
        holds it and hands out what a read already under way returns), then, at a later
        round once no read of it is waiting, released. Released at once, a read waiting on
        it would get the next message after another node had taken the partition and
        read past it; that message would be answered late, after later ones."""
        chosen = [part for part in sorted(self._held, reverse=True)
                  if not self.busy(part)][:max(0, surplus)]
        self._leaving &= set(chosen)  # no longer surplus, or work came in: read it again
        for part in chosen:
            if part in self._leaving and not self.reading(part):
                self._leaving.discard(part)
                await self._leases.release(self._held.pop(part))
                self._fresh.discard(part)
            else:
                self._leaving.add(part)

    def leaving(self, part: Part) -> bool:
        """The partition is being given back: its stream is no longer read here."""
        return part in self._leaving

    async def stop(self) -> None:
        """Hand every partition back at once (a clean stop is no failover). The rounds are
        driven by the backend's loop (`RedisBackend._keep_leases`), which it stops first."""
        for lease in [*self._held.values(), *([self._private] if self._private else [])]:
            try:
                await self._leases.release(lease)
            except (StoreError, OSError):
                pass  # they expire on their own
        self._held.clear()
        self._private = None
