"""MessageBus: the backend's durable stores and the dispatcher behind one object.

The stores are the backend's (`soulflow/backends/`: the files under `runtime/bus/` and
`runtime/dlq/`, or Redis), all asynchronous; the rest of the daemon calls these methods and
never knows which backend it runs on. Readers that must stay synchronous (the state summary,
/metrics, the page) read `stats`, a snapshot the "bus:stats" loop refreshes about once a second,
so a slow or lost Redis never stalls them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from soulflow.backends.base import Backend, Completing, Completion
from soulflow.bus.dispatcher import OutboundDispatcher, Sender
from soulflow.bus.retry import RetryPolicy
from soulflow.contracts import DeadLetter, EventSink, InboundDeadLetter, OutboundMessage

log = logging.getLogger(__name__)

RECENT_LETTERS = 20  # dead letters of each kind kept in the stats snapshot for the page
LETTERS_REREAD_S = 10.0  # the recent letters are re-read at least this often


@dataclass(slots=True)
class BusStats:
    """Counts and recent dead letters as of `refreshed_at` (0: never read yet)."""

    inbound_pending: int = 0
    outbox_pending: int = 0
    dlq: int = 0
    inbound_dlq: int = 0
    recent_dlq: list[DeadLetter] = field(default_factory=list)
    recent_inbound_dlq: list[InboundDeadLetter] = field(default_factory=list)
    refreshed_at: float = 0.0


class MessageBus:
    def __init__(
        self,
        backend: Backend,
        *,
        policy: RetryPolicy | None = None,
        outbound_concurrency: int = 16,
        on_event: EventSink | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend = backend
        self.inbound = backend.inbound
        self.outbox = backend.outbox
        self.dlq = backend.dlq
        # messages that could not be taken in (poison input), redacted: security/dead_letters.py
        self.inbound_dlq = backend.inbound_dlq
        self.stats = BusStats()
        self._letters_read_at = 0.0  # when the recent dead letters were last read in full
        self._senders: Callable[[str], Sender | None] = lambda provider: None
        self.dispatcher = OutboundDispatcher(
            self.outbox, self.dlq, lambda provider: self._senders(provider), policy=policy,
            concurrency=outbound_concurrency, clock=clock, on_event=on_event)

    def bind_senders(self, resolve: Callable[[str], Sender | None]) -> None:
        """Late binding: channels are built after the bus in the boot order."""
        self._senders = resolve

    async def start(self) -> None:
        await self.dispatcher.start()
        await self.refresh_stats()

    def publish_outbound(self, message: OutboundMessage) -> asyncio.Future[bool]:
        """Store the message in the outbox, then send it; await the result where it must be
        stored before going on (see OutboundDispatcher.publish)."""
        return self.dispatcher.publish(message)

    async def complete_inbound(self, keys: list[str], status: str,
                               error: str | None = None) -> list[Completion]:
        """Record how a turn ended for the messages it answered, behind the replies published
        before (OutboundDispatcher.complete): a turn need not wait for its reply's storing
        first, and both go to the store together. After the bus's stop, directly."""
        queued = self.dispatcher.complete(Completing(tuple(keys), status, error))
        if queued is not None:
            return await queued
        return [await self.inbound.complete(key, status, error) for key in keys]

    async def replay_dlq(self, message_ids: list[str] | None = None) -> int:
        """Put dead letters back in the outbox (all, or the given ids), then drop them."""
        letters = [e for e in await self.dlq.entries()
                   if message_ids is None or e.message.message_id in message_ids]
        for letter in letters:
            await self.publish_outbound(letter.to_outbound())
        await self.dlq.remove(letter.message.message_id for letter in letters)
        return len(letters)

    async def refresh_stats(self) -> BusStats:
        """Read the counts and recent dead letters once (raises if the store fails). The
        letters themselves are read again only when a count changed or every
        LETTERS_REREAD_S: a long dead-letter list is not read every second."""
        last, now = self.stats, time.time()
        dlq_count, inbound_dlq_count = await self.dlq.count(), await self.inbound_dlq.count()
        stale = now - self._letters_read_at >= LETTERS_REREAD_S
        recent_dlq, recent_inbound = last.recent_dlq, last.recent_inbound_dlq
        if stale or dlq_count != last.dlq:
            recent_dlq = await self.dlq.recent(RECENT_LETTERS)
        if stale or inbound_dlq_count != last.inbound_dlq:
            recent_inbound = await self.inbound_dlq.recent(RECENT_LETTERS)
        if stale:
            self._letters_read_at = now
        self.stats = BusStats(
            inbound_pending=await self.inbound.pending_count(),
            outbox_pending=await self.outbox.count(), dlq=dlq_count,
            inbound_dlq=inbound_dlq_count, recent_dlq=recent_dlq,
            recent_inbound_dlq=recent_inbound, refreshed_at=now)
        return self.stats

    async def fresh_stats(self, timeout_s: float = 0.5) -> BusStats:
        """The counts read now if the store answers within `timeout_s` (`/api/state` wants
        them current), else the last snapshot; not tried while the backend is unreachable."""
        if self.backend.status().get("connected", True):
            try:
                return await asyncio.wait_for(self.refresh_stats(), timeout_s)
            except Exception as exc:  # the loop logs outages; here the snapshot will do
                log.debug("bus stats: kept the last snapshot (%s: %s)", type(exc).__name__, exc)
        return self.stats

    async def stats_loop(self, interval_s: float = 1.0) -> None:
        """The "bus:stats" loop: refresh `stats`; a failing store keeps the last snapshot
        (its age shows in `refreshed_at`) and is logged once per outage."""
        failing = False
        while True:
            try:
                await self.refresh_stats()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not failing:
                    log.warning("bus stats: the store does not answer (%s: %s); showing the "
                                "last counts", type(exc).__name__, exc)
                failing = True
            else:
                failing = False
            await asyncio.sleep(interval_s)

    async def stop(self, timeout: float) -> None:
        await self.dispatcher.stop(timeout)
