"""Per-channel health: is the platform readable, are sends getting through, what went wrong.

A channel that keeps failing used to be visible only in the log. Each channel now has one
`ChannelHealth` record, fed by the channel loop (reads) and the outbound dispatcher (sends),
shown in `/api/state`, on the dashboard and by `soulflow status`. Errors are stored redacted
(a platform error may quote a URL with a token in it) and cut short.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

ERROR_CAP = 300


class LinkState(StrEnum):
    """Where a channel is: connecting at boot or after a restart, connected and reading,
    failing (its last read or connect failed), stopped (the daemon is shutting down)."""

    CONNECTING = "connecting"
    CONNECTED = "connected"
    FAILING = "failing"
    STOPPED = "stopped"


@dataclass(slots=True)
class ChannelHealth:
    name: str
    state: LinkState = LinkState.CONNECTING
    last_read_at: float | None = None
    last_send_at: float | None = None
    consecutive_failures: int = 0  # failed connects/reads in a row; a good read resets it
    send_failures: int = 0  # failed send attempts in a row; a good send resets it
    last_error: str = ""
    last_error_at: float | None = None
    restarts: int = 0  # how often the supervisor restarted the channel (stall or errors)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.state.value, "last_read_at": self.last_read_at,
                "last_send_at": self.last_send_at,
                "consecutive_failures": self.consecutive_failures,
                "send_failures": self.send_failures, "last_error": self.last_error,
                "last_error_at": self.last_error_at, "restarts": self.restarts}


class HealthBoard:
    """The health records of every channel; the only writer of `ChannelHealth` fields."""

    def __init__(self, *, redact: Callable[[str], str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._records: dict[str, ChannelHealth] = {}
        self._redact = redact
        self._clock = clock

    def get(self, name: str) -> ChannelHealth:
        record = self._records.get(name)
        if record is None:
            record = self._records[name] = ChannelHealth(name)
        return record

    def __iter__(self) -> Iterator[ChannelHealth]:
        return iter(self._records.values())

    def _error(self, record: ChannelHealth, error: str) -> None:
        text = self._redact(error) if self._redact is not None else error
        record.last_error = text[:ERROR_CAP]
        record.last_error_at = self._clock()

    def connecting(self, name: str) -> None:
        self.get(name).state = LinkState.CONNECTING

    def connect_failed(self, name: str, error: str) -> None:
        record = self.get(name)
        record.state = LinkState.FAILING
        record.consecutive_failures += 1
        self._error(record, error)

    def connected(self, name: str) -> None:
        record = self.get(name)
        record.state = LinkState.CONNECTED
        record.consecutive_failures = 0

    def read_ok(self, name: str) -> None:
        record = self.get(name)
        record.state = LinkState.CONNECTED
        record.last_read_at = self._clock()
        record.consecutive_failures = 0

    def read_failed(self, name: str, error: str) -> int:
        """Count a failed read; returns the failures in a row."""
        record = self.get(name)
        record.state = LinkState.FAILING
        record.consecutive_failures += 1
        self._error(record, error)
        return record.consecutive_failures

    def restarted(self, name: str) -> None:
        record = self.get(name)
        record.restarts += 1
        record.state = LinkState.CONNECTING

    def stopped(self, name: str) -> None:
        self.get(name).state = LinkState.STOPPED

    def send_outcome(self, name: str, error: str | None) -> None:
        """What the dispatcher saw for one send attempt to this channel."""
        record = self.get(name)
        if error is None:
            record.last_send_at = self._clock()
            record.send_failures = 0
        else:
            record.send_failures += 1
            self._error(record, f"send: {error}")
