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
    failing (its last read or connect failed), stopped (the daemon is shutting down), or
    standby: connected for sending while another node reads the account (redis backend)."""

    CONNECTING = "connecting"
    CONNECTED = "connected"
    FAILING = "failing"
    STOPPED = "stopped"
    STANDBY = "standby"


class Role(StrEnum):
    """This node's part in reading a shared platform account (SOULFLOW_BACKEND=redis)."""

    LEADER = "leader"  # holds the lease `account:<name>`: reads the account
    STANDBY = "standby"  # sends only; takes over when the leader's lease ends


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
    # a shared account only (redis backend; None with files: this node always reads)
    role: Role | None = None
    lease_token: int | None = None  # the fencing token of our term as leader
    role_since: float | None = None  # when this node took or left the reader's part

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.state.value, "last_read_at": self.last_read_at,
                "last_send_at": self.last_send_at,
                "consecutive_failures": self.consecutive_failures,
                "send_failures": self.send_failures, "last_error": self.last_error,
                "last_error_at": self.last_error_at, "restarts": self.restarts,
                "role": self.role.value if self.role is not None else None,
                "lease_token": self.lease_token, "role_since": self.role_since}


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

    def leading(self, name: str, token: int) -> None:
        """This node took the account's lease (`token`) and starts reading it."""
        record = self.get(name)
        record.role, record.lease_token, record.role_since = Role.LEADER, token, self._clock()
        record.state = LinkState.CONNECTING

    def standby(self, name: str) -> None:
        """Another node reads the account (or nobody yet): this one only sends. Not a
        failure: the last read error, if any, is kept for the record."""
        record = self.get(name)
        if record.role is not Role.STANDBY:
            record.role, record.role_since = Role.STANDBY, self._clock()
        record.lease_token = None
        record.state = LinkState.STANDBY
        record.consecutive_failures = 0

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
