"""A leader lease kept alive: "exactly one node reads this platform account".

`LeaderElection` tries to take the lease `account:<name>`, renews it every quarter TTL, and
reports changes through `on_change(is_leader)`. It is lost the moment the local deadline passes
without a successful renewal, even if Redis never answers (the renewal is bounded by the deadline
itself), so a node cut off from Redis stops reading a third of a TTL before another node can take
the lease: two readers of one Telegram bot never overlap, whatever the network does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from soulflow.backends.base import Lease, LeaseStore

log = logging.getLogger(__name__)


class LeaderElection:
    def __init__(self, leases: LeaseStore, name: str, owner: str, *, ttl_s: float,
                 on_change: Callable[[bool], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._leases = leases
        self.name = name
        self.owner = owner
        self.ttl_s = ttl_s
        self._on_change = on_change
        self._clock = clock
        self._lease: Lease | None = None
        self._changed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def lease(self) -> Lease | None:
        """The lease while it is safe to act as leader (for fenced writes), else None."""
        lease = self._lease
        return lease if lease is not None and lease.valid(self._clock()) else None

    @property
    def is_leader(self) -> bool:
        return self.lease is not None

    async def wait_changed(self) -> None:
        """Until leadership is next gained or lost."""
        self._changed.clear()
        await self._changed.wait()

    def _set(self, lease: Lease | None) -> None:
        was = self._lease is not None
        self._lease = lease
        if was != (lease is not None):
            log.info("%s: %s leadership of %s", self.owner,
                     "took" if lease is not None else "lost", self.name)
            self._changed.set()
            if self._on_change is not None:
                self._on_change(lease is not None)

    async def step(self) -> None:
        """One round: renew (bounded by our own deadline) or try to take the lease."""
        lease = self._lease
        if lease is not None:
            budget = lease.deadline - self._clock()
            renewed = None
            if budget > 0:
                try:
                    renewed = await asyncio.wait_for(self._leases.renew(lease, self.ttl_s),
                                                     timeout=budget)
                except Exception as exc:  # timeout or store error: retry until the deadline
                    log.warning("%s: renewing %s failed (%s)", self.owner, self.name,
                                str(exc) or type(exc).__name__)
                    renewed = lease if lease.valid(self._clock()) else None
            self._set(renewed if renewed is not None and renewed.valid(self._clock()) else None)
            return
        try:
            self._set(await asyncio.wait_for(self._leases.acquire(self.name, self.owner,
                                                                  self.ttl_s),
                                             timeout=self.ttl_s / 4))
        except Exception as exc:
            log.debug("%s: taking %s failed (%s)", self.owner, self.name, exc)

    def start(self) -> None:
        self._stopping.clear()
        self._task = asyncio.create_task(self._run(), name=f"leader-{self.name}-{self.owner}")

    async def _run(self) -> None:
        while not self._stopping.is_set():
            await self.step()
            wait = self.ttl_s / 4
            lease = self._lease
            if lease is not None:  # wake at the deadline at the latest, to notice a loss
                wait = max(0.0, min(wait, lease.deadline - self._clock()))
            try:
                await asyncio.wait_for(self._stopping.wait(), timeout=wait)
            except TimeoutError:
                pass

    async def stop(self) -> None:
        """Stop and release (another node takes over at once instead of after the TTL)."""
        self._stopping.set()
        if self._task is not None:
            await self._task
            self._task = None
        lease = self._lease
        self._set(None)
        if lease is not None:
            try:
                await asyncio.wait_for(self._leases.release(lease), timeout=self.ttl_s / 4)
            except Exception as exc:
                log.debug("%s: releasing %s failed (%s)", self.owner, self.name, exc)
