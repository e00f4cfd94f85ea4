"""Services that run on one node of a cluster at a time: the heartbeat and the ops watchdog.

With the Redis backend every node runs the same daemon, but a heartbeat on three nodes would
check (and message) three times, and three watchdogs would each act on the same shared run
journals. `SingleRunner` keeps the lease `service:ops` with a `LeaderElection` (the same kept-
alive, fenced lease that decides which node reads a platform account) and runs such a loop
only while this node holds it: started when the lease is taken, cancelled when it is lost (the
lease's local deadline passes before another node can take it, so two never overlap), started
on another node within about one lease TTL when its holder dies, at once when it stops
cleanly. Without a cluster (`election` None) the loop simply runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from soulflow.backends.base import LeaseStore
from soulflow.backends.leader import LeaderElection
from soulflow.supervisor import cancel_and_wait

__all__ = ["SERVICE_LEASE", "SingleRunner"]

log = logging.getLogger(__name__)

SERVICE_LEASE = "service:ops"


class SingleRunner:
    """The `service:ops` lease of one node, and loops gated on it."""

    def __init__(self, leases: LeaseStore | None, node_id: str, *, ttl_s: float,
                 name: str = SERVICE_LEASE) -> None:
        self.election = (LeaderElection(leases, name, node_id, ttl_s=ttl_s)
                         if leases is not None else None)
        self.ttl_s = ttl_s

    @property
    def shared(self) -> bool:
        """True when other nodes compete for the lease (Redis)."""
        return self.election is not None

    def is_leader(self) -> bool:
        return self.election is None or self.election.is_leader

    def start(self) -> None:
        if self.election is not None:
            self.election.start()

    async def stop(self) -> None:
        """Release the lease (another node takes over at once)."""
        if self.election is not None:
            await self.election.stop()

    def gated(self, name: str,
              factory: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        """A supervised loop's factory that runs `factory()` only while this node leads."""
        if self.election is None:
            return factory
        election = self.election

        async def run() -> None:
            while True:
                if not election.is_leader:
                    await self._leadership_changed()
                    continue
                log.info("%s runs on this node (%s)", name, election.owner)
                work = asyncio.ensure_future(factory())
                try:
                    while not work.done() and election.is_leader:
                        await asyncio.wait({work}, timeout=self.ttl_s / 8)
                finally:
                    if not work.done():
                        await cancel_and_wait([work])
                        log.info("%s stopped on this node: it no longer holds %s", name,
                                 election.name)
                if work.done() and not work.cancelled():
                    work.result()  # a crash is the Supervisor's to restart
                    return

        return run

    async def _leadership_changed(self) -> None:
        """Until leadership may have changed (bounded: a change between our check and the
        wait is still noticed)."""
        assert self.election is not None
        try:
            await asyncio.wait_for(self.election.wait_changed(), timeout=self.ttl_s / 4)
        except TimeoutError:
            pass
