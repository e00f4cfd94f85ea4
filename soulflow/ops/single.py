"""Services that run on one node of a cluster at a time: the heartbeat, the decision dedupe.

With the Redis backend every node runs the same daemon, but a heartbeat on three nodes would
check (and message) three times. Two kinds of lease decide where such work runs, both kept
alive with a local deadline that passes before another node can take the lease (so two never
overlap):

- `service:ops`, a `LeaderElection` kept by `SingleRunner`: the ops loop merges duplicate
  decisions only on its holder. Taken by another node within about one lease TTL when its
  holder dies, at once when it stops cleanly.
- the partition lease of a chat (`backend.owns(chat)`): the heartbeat runs on the node holding
  its notice chat, like every other piece of that chat's work (its runs, its approvals), so
  a heartbeat turn cut off by a move is found by the chat's next holder and cancelled, as at
  boot (`AgentDomain.resumable_runs`).

`gated()` turns a loop into one that runs only while such a condition holds: started when it
starts holding, cancelled when it stops. Without a cluster (`leases` None) it simply runs.
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
    """The `service:ops` lease of one node, and loops gated on a lease."""

    def __init__(self, leases: LeaseStore | None, node_id: str, *, ttl_s: float,
                 name: str = SERVICE_LEASE) -> None:
        self.election = (LeaderElection(leases, name, node_id, ttl_s=ttl_s)
                         if leases is not None else None)
        self.ttl_s = ttl_s

    @property
    def shared(self) -> bool:
        """True when other nodes compete for the work (Redis)."""
        return self.election is not None

    def is_leader(self) -> bool:
        """This node holds `service:ops` (always, without a cluster)."""
        return self.election is None or self.election.is_leader

    def start(self) -> None:
        if self.election is not None:
            self.election.start()

    async def stop(self) -> None:
        """Release the lease (another node takes over at once)."""
        if self.election is not None:
            await self.election.stop()

    def gated(self, name: str, factory: Callable[[], Awaitable[None]], *,
              holds: Callable[[], bool] | None = None) -> Callable[[], Awaitable[None]]:
        """A supervised loop's factory that runs `factory()` only while `holds()` (default:
        this node holds `service:ops`). `holds` is a local check (a lease's deadline), asked
        every eighth of a TTL: a loss is acted on well before another node may start."""
        if self.election is None:
            return factory
        check = holds or self.is_leader
        step = self.ttl_s / 8

        async def run() -> None:
            while True:
                while not check():
                    await asyncio.sleep(step)
                log.info("%s runs on this node", name)
                work = asyncio.ensure_future(factory())
                try:
                    while not work.done() and check():
                        await asyncio.wait({work}, timeout=step)
                finally:
                    if not work.done():
                        await cancel_and_wait([work])
                        log.info("%s stopped on this node: another node may run it now", name)
                if work.done() and not work.cancelled():
                    work.result()  # a crash is the Supervisor's to restart
                    return

        return run
