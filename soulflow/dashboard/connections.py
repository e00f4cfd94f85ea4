"""Slow clients cannot hold the dashboard's connections, nor the daemon's file descriptors.

Opening a TCP connection costs an attacker nothing and needs no token; each one the daemon
accepts costs it a file descriptor, shared with journals, channel and provider connections.
Without a bound, 1,100 connections that never finished their headers exhausted the
descriptors: the dashboard stopped answering and so did Telegram (its HTTPS calls need
descriptors too). So every dashboard connection is admitted by a `ConnectionGate`:

* **Caps.** At most `max_open` connections at once and `max_per_address` from one client
  address (an IPv6 client is counted by its /64: one host has a whole /64 to pick from).
* **A connection owes a request head.** From accept it must deliver a complete request head
  within `header_timeout_s`; after each response it may sit idle for `idle_timeout_s` (HTTP
  keep-alive), but once the next request's first bytes arrive its head is due within
  `header_timeout_s` too. A connection past its deadline is aborted (not closed: a client that
  reads nothing could otherwise hold the socket with an unflushed response).
* **A response must be read.** A client that stops reading while an answer is being written
  (pipelined requests for the page's files, never read) would keep its connection busy
  forever: when the socket has not taken the pending bytes for `idle_timeout_s`, it is aborted.
* **Over a cap, the oldest connection that owes a head gives way** — of the same address for
  the per-address cap, of any address for the total one — and the newcomer is admitted. Only
  when every connection is busy with a request (a response being written, the event stream
  `/api/events`, a long poll) is the newcomer closed at once, before anything is read. So a
  flood of slow connections cannot keep the operator out (each of her requests is in flight
  only while it is served), and a busy dashboard tab keeps its event stream.

The gate knows nothing of HTTP: `listener.py` ties it to aiohttp's request handler.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

log = logging.getLogger(__name__)

#: how long a keep-alive connection may sit idle between requests: longer than the page
#: waits between its requests while someone looks at it, short enough that idle sockets do
#: not pile up (the browser simply opens a new connection after it)
IDLE_TIMEOUT_S = 30.0
#: the dashboard holds at most this share of the process's open-files limit (its caps plus
#: the connections being accepted or closed at a moment); the rest is for journals, channel
#: and model connections, MCP servers and tools
OPEN_FILES_SHARE = 2
#: a summary of connections refused or made to give way, at most this often
NOTICE_INTERVAL_S = 60.0


class Closed(StrEnum):
    """Why the gate ended a connection (the `/metrics` label)."""

    REFUSED = "refused"  # over a cap with every connection busy: closed before reading
    EVICTED = "evicted"  # gave way to a newcomer over a cap (it owed a request head)
    TIMEOUT = "timeout"  # its request head did not come, or its answer was not read, in time


@dataclass(frozen=True)
class ConnectionLimits:
    """The gate's bounds (DASHBOARD_MAX_CONNECTIONS, DASHBOARD_MAX_CONNECTIONS_PER_IP,
    DASHBOARD_HEADER_TIMEOUT_S)."""

    max_open: int = 256
    max_per_address: int = 32
    header_timeout_s: float = 10.0
    idle_timeout_s: float = IDLE_TIMEOUT_S

    def within(self, open_files: int, in_flight: int = 0) -> tuple[ConnectionLimits, list[str]]:
        """These limits fitted to the open-files limit `open_files`: the caps, plus
        `in_flight` descriptors of connections being accepted or closed, clamped to
        `1/OPEN_FILES_SHARE` of it; and why, one sentence per clamp, for the log."""
        notes: list[str] = []
        budget = max(4, open_files // OPEN_FILES_SHARE - in_flight)
        fitted = self
        if fitted.max_open > budget:
            notes.append(f"DASHBOARD_MAX_CONNECTIONS={fitted.max_open} with {in_flight} "
                         f"connections in flight is more than half the open-files limit "
                         f"({open_files}): using {budget}")
            fitted = replace(fitted, max_open=budget)
        if fitted.max_per_address > fitted.max_open:
            notes.append(f"DASHBOARD_MAX_CONNECTIONS_PER_IP={fitted.max_per_address} is more "
                         f"than the connections allowed in all: using {fitted.max_open}")
            fitted = replace(fitted, max_per_address=fitted.max_open)
        # an idle keep-alive connection never has less time than a request head
        fitted = replace(fitted, idle_timeout_s=max(fitted.idle_timeout_s,
                                                    fitted.header_timeout_s))
        return fitted, notes


def address_key(peername: Any) -> str:
    """The address a connection is counted under: the IP, an IPv6 client by its /64 (an
    IPv4-mapped one as IPv4; loopback as itself)."""
    host = peername[0] if isinstance(peername, tuple) and peername else str(peername or "")
    try:
        ip = ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return str(host)
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        if not ip.is_loopback:
            return str(ipaddress.IPv6Network(f"{ip}/64", strict=False))
    return str(ip)


@dataclass
class ConnectionCounts:
    """What the gate did since the dashboard started (for `/metrics` and the log)."""

    open: int = 0
    refused: int = 0
    evicted: int = 0
    timeout: int = 0

    def closed(self) -> dict[Closed, int]:
        return {Closed.REFUSED: self.refused, Closed.EVICTED: self.evicted,
                Closed.TIMEOUT: self.timeout}


class Connection:
    """One admitted connection as the gate sees it: its address, whether it owes a request
    head, and the deadline for that head. `abort` drops the socket without flushing."""

    def __init__(self, gate: ConnectionGate, address: str, abort: Callable[[], None]) -> None:
        self.gate = gate
        self.address = address
        self._abort = abort
        self._loop = asyncio.get_running_loop()
        self._deadline: asyncio.TimerHandle | None = None
        self._stalled: asyncio.TimerHandle | None = None  # writing paused: client not reading
        self._head_started = False
        self.owes_head = False
        self.open = True

    def await_head(self, *, first: bool) -> None:
        """The connection is between requests: a new one (its head is due within the header
        timeout) or a kept-alive one after a response (idle for at most the idle timeout)."""
        limits = self.gate.limits
        self.owes_head, self._head_started = True, first
        self._arm(limits.header_timeout_s if first else limits.idle_timeout_s)
        self.gate.waiting(self)

    def bytes_arrived(self) -> None:
        """Bytes came in: if they start the next request's head, that head is due within
        the header timeout (trickling it byte by byte does not extend the deadline)."""
        if self.owes_head and not self._head_started:
            self._head_started = True
            self._arm(self.gate.limits.header_timeout_s)

    def head_received(self) -> None:
        """A whole request head came in: the request is served without a deadline (an
        event stream lasts as long as the tab is open)."""
        self.owes_head = False
        self._disarm()
        self.gate.busy(self)

    def write_stalled(self) -> None:
        """The socket stopped taking the answer (the client does not read): it has the idle
        timeout to start again."""
        if self._stalled is None:
            self._stalled = self._loop.call_later(self.gate.limits.idle_timeout_s, self.close,
                                                  Closed.TIMEOUT)

    def write_resumed(self) -> None:
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None

    def close(self, reason: Closed) -> None:
        """End the connection now (over a cap, or its head did not come in time)."""
        if not self.open:
            return
        self.gate.count(reason, self.address)
        self.released()
        self._abort()

    def released(self) -> None:
        """The socket is gone (or going): stop counting it."""
        if self.open:
            self.open = False
            self._disarm()
            self.write_resumed()
            self.gate.release(self)

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self._loop.call_later(seconds, self.close, Closed.TIMEOUT)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None


class ConnectionGate:
    """Counts the open dashboard connections, per address and in all; admits a newcomer
    (making the oldest connection that owes a head give way over a cap) or refuses it."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.counts = ConnectionCounts()
        self._per_address: Counter[str] = Counter()
        # connections that owe a request head, oldest first (dicts keep insertion order)
        self._waiting: dict[Connection, None] = {}
        self._waiting_at: dict[str, dict[Connection, None]] = {}
        self._notice = _Notice()

    def admit(self, address: str, abort: Callable[[], None]) -> Connection | None:
        """A `Connection` to track, or None: the newcomer is to be closed unread."""
        if self._per_address[address] >= self.limits.max_per_address:
            oldest = next(iter(self._waiting_at.get(address, ())), None)
            if oldest is None:
                self.count(Closed.REFUSED, address)
                return None
            oldest.close(Closed.EVICTED)
        if self.counts.open >= self.limits.max_open:
            oldest = next(iter(self._waiting), None)
            if oldest is None:
                self.count(Closed.REFUSED, address)
                return None
            oldest.close(Closed.EVICTED)
        connection = Connection(self, address, abort)
        self._per_address[address] += 1
        self.counts.open += 1
        connection.await_head(first=True)
        return connection

    def waiting(self, connection: Connection) -> None:
        """`connection` owes a request head from now on (the newest that does)."""
        self.busy(connection)
        self._waiting[connection] = None
        self._waiting_at.setdefault(connection.address, {})[connection] = None

    def busy(self, connection: Connection) -> None:
        self._waiting.pop(connection, None)
        at = self._waiting_at.get(connection.address)
        if at is not None:
            at.pop(connection, None)
            if not at:
                del self._waiting_at[connection.address]

    def release(self, connection: Connection) -> None:
        self.busy(connection)
        self.counts.open -= 1
        self._per_address[connection.address] -= 1
        if self._per_address[connection.address] <= 0:
            del self._per_address[connection.address]

    def count(self, reason: Closed, address: str) -> None:
        if reason is Closed.REFUSED:
            self.counts.refused += 1
        elif reason is Closed.EVICTED:
            self.counts.evicted += 1
        else:
            self.counts.timeout += 1
            log.debug("dashboard: closed a connection from %s: no request head, or its "
                      "answer not read, in time", address)
            return  # a browser's unused spare connection ends like this too: not news
        self._notice.note(reason, address, self.limits)

    def close(self) -> None:
        """The dashboard stops: a pending summary is written now."""
        self._notice.flush()


class _Notice:
    """Logs that the caps were reached: at once the first time, then a summary at most
    every NOTICE_INTERVAL_S, so a flood of connections does not become a flood of lines."""

    def __init__(self) -> None:
        self._last: float | None = None
        self._pending: Counter[Closed] = Counter()
        self._addresses: Counter[str] = Counter()
        self._timer: asyncio.TimerHandle | None = None
        self._limits: ConnectionLimits | None = None

    def note(self, reason: Closed, address: str, limits: ConnectionLimits) -> None:
        loop = asyncio.get_running_loop()
        self._pending[reason] += 1
        self._addresses[address] += 1
        self._limits = limits
        if self._last is None or loop.time() - self._last >= NOTICE_INTERVAL_S:
            self.flush()
        elif self._timer is None:
            self._timer = loop.call_at(self._last + NOTICE_INTERVAL_S, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._pending or self._limits is None:
            return
        busiest, from_busiest = self._addresses.most_common(1)[0]
        log.warning(
            "dashboard: at its connection caps (%d open, %d per address): %d new "
            "connection(s) refused, %d slow one(s) closed to make room; most from %s (%d)",
            self._limits.max_open, self._limits.max_per_address,
            self._pending[Closed.REFUSED], self._pending[Closed.EVICTED], busiest,
            from_busiest)
        self._pending.clear()
        self._addresses.clear()
        try:
            self._last = asyncio.get_running_loop().time()
        except RuntimeError:
            self._last = None
