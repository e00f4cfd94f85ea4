"""Live events for the dashboard's SSE stream and its "recent messages" panel.

In-memory by design: these are notifications about work whose durable record lives in the
journals. A slow subscriber loses old notifications (bounded queue), never slows the daemon.
Events are redacted when they leave the process (`export`), not when published, so a daemon
with nobody watching pays nothing for them.

Reconnecting: the hub keeps a bounded ring of recent events, and each event's SSE id is
`<stream>.<n>`, `stream` a random name of this process. A browser that reconnects sends the
last id it saw (`Last-Event-ID`) and gets what it missed (`replay_after`); an id of another
stream (the daemon restarted) or one older than the ring replays the whole ring, flagged as a
`gap` so the page knows to reload its state.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class LiveEvent:
    id: int
    kind: str
    data: dict[str, Any]
    at: float = field(default_factory=time.time)
    exported: dict[str, Any] | None = None  # redacted form, computed once when first shown

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "at": self.at, "data": self.data}


@dataclass(frozen=True, slots=True)
class Replay:
    """What a (re)connecting subscriber is sent first; `gap`: some events were missed."""

    events: list[dict[str, Any]]
    gap: bool


class Subscription:
    def __init__(self, hub: EventHub, maxsize: int) -> None:
        self._hub = hub
        self.queue: asyncio.Queue[LiveEvent] = asyncio.Queue(maxsize)
        self.dropped = 0

    def offer(self, event: LiveEvent) -> None:
        if self.queue.full():
            self.queue.get_nowait()
            self.dropped += 1
        self.queue.put_nowait(event)

    async def next(self, timeout: float) -> LiveEvent | None:
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None

    def close(self) -> None:
        self._hub.unsubscribe(self)


class EventHub:
    """Fan-out of live events; keeps the last few for late joiners."""

    def __init__(self, *, history: int = 200, redact: Any = None) -> None:
        self.stream = secrets.token_hex(4)  # names this process's ids (see replay_after)
        self._ids = itertools.count(1)
        self._recent: deque[LiveEvent] = deque(maxlen=history)
        self._subscribers: set[Subscription] = set()
        self._redact = redact

    def publish(self, kind: str, data: dict[str, Any]) -> None:
        event = LiveEvent(next(self._ids), kind, data)
        self._recent.append(event)
        for subscription in list(self._subscribers):
            subscription.offer(event)

    def subscribe(self, maxsize: int = 500) -> Subscription:
        subscription = Subscription(self, maxsize)
        self._subscribers.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscribers.discard(subscription)

    def export(self, event: LiveEvent) -> dict[str, Any]:
        """The event as it may be shown outside the daemon (redacted)."""
        if event.exported is None:
            record = event.to_dict()
            event.exported = self._redact(record) if self._redact is not None else record
        return event.exported

    def recent(self, kinds: set[str] | None = None, limit: int = 50) -> list[dict[str, Any]]:
        events = [e for e in self._recent if kinds is None or e.kind in kinds]
        return [self.export(e) for e in events[-limit:]]

    def event_id(self, event: dict[str, Any]) -> str:
        """The SSE id of an exported event."""
        return f"{self.stream}.{event['id']}"

    def replay_after(self, last_event_id: str | None, *, fresh: int = 20) -> Replay:
        """Events after `last_event_id` (an SSE id this hub gave out); without one, the last
        `fresh` events, for a page that just opened."""
        if not last_event_id:
            return Replay(self.recent(limit=fresh), gap=False)
        stream, _, number = last_event_id.strip().partition(".")
        ring = list(self._recent)
        try:
            seen = int(number)
        except ValueError:
            seen = -1
        if stream != self.stream or seen < 0:
            return Replay([self.export(e) for e in ring], gap=True)
        oldest = ring[0].id if ring else seen + 1
        return Replay([self.export(e) for e in ring if e.id > seen], gap=seen + 1 < oldest)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)
