"""One reader per platform account when several daemons share it (SOULFLOW_BACKEND=redis).

Telegram answers a second `getUpdates` poller with 409, Slack spreads Socket Mode events over
every open connection, and a second Discord gateway session would deliver every message twice:
only one node may *read* an account. Every node may *send* (a reply goes out from the node
that holds its chat's work). `AccountLeadership` wraps the backend's `LeaderElection` on lease
`account:<channel name>`: the channel's reader (reader.py) waits for leadership before it
starts the read side, and stops it the moment leadership is lost or a fenced cursor write is
refused. With the file backend an adapter has no leadership and reads at once, as before.

The election object comes from the runtime (layer 7): this package sits beside
`soulflow.backends` in the layer table and may not import it, so `Election` states the little
this module needs from `soulflow.backends.leader.LeaderElection`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from soulflow.backends.base import Lease

log = logging.getLogger(__name__)

_RECHECK_S = 0.2  # how often a waiting reader looks at the election (a local read)


class Election(Protocol):
    """What `soulflow.backends.leader.LeaderElection` offers."""

    name: str
    owner: str

    @property
    def lease(self) -> Lease | None: ...

    async def wait_changed(self) -> None: ...

    def start(self) -> None: ...

    async def stop(self) -> None: ...


class AccountLeadership:
    """Leadership of one platform account by this node, for the reader and the cursors.

    `fence(reason)` is called by the channel's cursor state when the backend refuses a write
    made under our lease (another node holds the account now, or the lease vanished): the
    current term is over for the reader even if the election has not noticed yet."""

    def __init__(self, election: Election) -> None:
        self.election = election
        self._fenced = asyncio.Event()
        self._fenced_reason = ""
        self._fenced_token: int | None = None  # the term a refused write ended
        self._running = False

    @property
    def name(self) -> str:
        return self.election.name

    @property
    def node_id(self) -> str:
        return self.election.owner

    @property
    def lease(self) -> Lease | None:
        """The lease while this node may act as the reader (None once fenced or lost)."""
        if self._fenced.is_set():
            return None
        return self.election.lease

    def start(self) -> None:
        if not self._running:
            self._running = True
            self.election.start()

    async def stop(self) -> None:
        """Stop campaigning and release the lease (another node takes over at once)."""
        if self._running:
            self._running = False
            await self.election.stop()

    async def acquired(self) -> Lease:
        """Wait until this node holds the account; a new term clears an earlier fence (a
        fenced term is over even while the election still believes in it: its next renewal
        fails, and only a new lease, with a new token, starts a term)."""
        while True:
            lease = self.election.lease
            if lease is not None and lease.token != self._fenced_token:
                self._fenced.clear()
                self._fenced_reason = ""
                return lease
            await self._changed(_RECHECK_S, watch_fence=False)

    async def lost(self, lease: Lease) -> str:
        """Wait until the term of `lease` is over; returns why. Checks at least every
        `_RECHECK_S` and at the lease's local deadline, so neither a missed wake-up nor a
        renewal stuck on a dead link keeps us reading."""
        while True:
            if self._fenced.is_set():
                return self._fenced_reason or "a cursor write was refused"
            current = self.election.lease
            if current is None or current.token != lease.token:
                return "the lease was lost"
            await self._changed(min(_RECHECK_S, max(0.0, current.deadline - time.monotonic())))

    async def _changed(self, timeout: float, *, watch_fence: bool = True) -> None:
        """Until the election reports a change, a fence, or `timeout` (local checks only:
        no lease traffic)."""
        waits = {asyncio.ensure_future(self.election.wait_changed())}
        if watch_fence:
            waits.add(asyncio.ensure_future(self._fenced.wait()))
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()

    def fence(self, reason: str) -> None:
        """A write under our lease was refused: stop reading now."""
        if not self._fenced.is_set():
            log.warning("%s: %s; this node stops reading the account", self.name, reason)
            lease = self.election.lease
            self._fenced_token = lease.token if lease is not None else self._fenced_token
            self._fenced_reason = reason
            self._fenced.set()
