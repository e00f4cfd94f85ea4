"""Message counts per channel: totals for `/metrics`, a per-minute ring for the dashboard's chart.

Fed by the daemon's live events (`inbound.received`, `outbound.sent`, `outbound.dead`,
`outbound.retry`) and the dispatcher's send outcomes, so no pipeline code counts twice. The
ring keeps one bucket per minute for the last hour and per channel: 60 small records, whatever
the traffic. In memory only: after a restart the chart starts empty and the counters at zero,
as Prometheus counters do.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

RING_MINUTES = 60


@dataclass(slots=True)
class ChannelTraffic:
    """One channel's totals and its last hour, minute by minute."""

    received: int = 0
    sent: int = 0
    send_failures: int = 0
    dead_lettered: int = 0
    # minute number (epoch seconds // 60) -> [in, out]
    minutes: dict[int, list[int]] = field(default_factory=dict)

    def bump(self, minute: int, direction: int) -> None:
        bucket = self.minutes.get(minute)
        if bucket is None:
            bucket = self.minutes[minute] = [0, 0]
            for old in [m for m in self.minutes if m <= minute - RING_MINUTES]:
                del self.minutes[old]
        bucket[direction] += 1


class TrafficCounters:
    """Per-channel counters and retry reasons, updated from events on the event loop."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._channels: dict[str, ChannelTraffic] = {}
        self.retries: dict[str, int] = {}  # by reason: rate_limited, transient

    def channel(self, name: str) -> ChannelTraffic:
        record = self._channels.get(name)
        if record is None:
            record = self._channels[name] = ChannelTraffic()
        return record

    def observe(self, kind: str, data: dict[str, Any]) -> None:
        """Count one live event (an EventSink: called for every event the daemon publishes)."""
        provider = str(data.get("provider") or "")
        if not provider:
            return
        minute = int(self._clock() // 60)
        if kind == "inbound.received":
            record = self.channel(provider)
            record.received += 1
            record.bump(minute, 0)
        elif kind == "outbound.sent":
            record = self.channel(provider)
            record.sent += 1
            record.bump(minute, 1)
        elif kind == "outbound.dead":
            self.channel(provider).dead_lettered += 1
        elif kind == "outbound.retry":
            reason = str(data.get("reason") or "transient")
            self.retries[reason] = self.retries.get(reason, 0) + 1

    def send_outcome(self, provider: str, error: str | None) -> None:
        """The dispatcher's outcome listener: every failed send attempt counts."""
        if error is not None:
            self.channel(provider).send_failures += 1

    def channels(self) -> dict[str, ChannelTraffic]:
        return dict(self._channels)

    def per_minute(self, names: list[str] | None = None) -> dict[str, Any]:
        """The last hour per channel, oldest minute first: `{"start": epoch seconds of the
        first minute, "channels": {name: {"in": [60 ints], "out": [60 ints]}}}`."""
        now_minute = int(self._clock() // 60)
        first = now_minute - RING_MINUTES + 1
        series: dict[str, dict[str, list[int]]] = {}
        for name in names if names is not None else list(self._channels):
            record = self._channels.get(name) or ChannelTraffic()
            rows = [record.minutes.get(first + i, [0, 0]) for i in range(RING_MINUTES)]
            series[name] = {"in": [r[0] for r in rows], "out": [r[1] for r in rows]}
        return {"start": first * 60, "minutes": RING_MINUTES, "channels": series}
