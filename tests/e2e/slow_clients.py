"""A slow-client attacker for the dashboard's port (issue 17, finding 12), for the e2e test and
bench/slow_clients.py.

`SlowClients` keeps up to `count` connections open to a port, on an event loop of its own
thread: each sends the start of a request head, then one more byte every `trickle_s`, and
never finishes it. A connection the server closes is opened again after `reconnect_s`, so the
attacker keeps trying to hold `count` of them, as a slowloris tool does. Source addresses
cycle through `sources` (on Linux all of 127.0.0.0/8 is loopback, so one machine plays many
clients). Counts are kept for the test: connections open now, opened in all, closed by the
server, connect attempts that failed or timed out.
"""

from __future__ import annotations

import asyncio
import itertools
import resource
import threading
from collections.abc import Sequence
from dataclasses import dataclass

PARTIAL_HEAD = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "  # never followed by \r\n\r\n
CONNECT_TIMEOUT_S = 5.0


@dataclass
class SlowCounts:
    open: int = 0  # connected from this side and not closed by the server yet
    opened: int = 0
    closed_by_server: int = 0
    failed: int = 0  # a connect that failed or timed out (e.g. the daemon out of descriptors)


def loopback_sources(count: int, first: int = 10) -> list[str]:
    """`count` loopback addresses other than 127.0.0.1 (the operator's own)."""
    return [f"127.0.{(first + n) // 250}.{(first + n) % 250 + 1}" for n in range(count)]


def raise_own_open_files(needed: int) -> None:
    """This process holds the attacker's sockets: its soft limit must allow them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            raise RuntimeError(f"the hard open-files limit ({hard}) is below {needed}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


class SlowClients:
    """`count` never-finished requests to `host:port`, held from a thread until `stop()`."""

    def __init__(self, port: int, count: int, *, sources: Sequence[str] = ("127.0.0.2",),
                 host: str = "127.0.0.1", trickle_s: float = 1.0,
                 reconnect_s: float = 0.5) -> None:
        self.port, self.count, self.host = port, count, host
        self.sources = list(sources)
        self.trickle_s, self.reconnect_s = trickle_s, reconnect_s
        self.counts = SlowCounts()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="slow-clients", daemon=True)

    def __enter__(self) -> SlowClients:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        raise_own_open_files(self.count + 512)
        self._thread.start()

    def stop(self) -> None:
        if self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(30)

    def snapshot(self) -> SlowCounts:
        with self._lock:
            return SlowCounts(**vars(self.counts))

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        sources = itertools.cycle(self.sources)
        holders = [asyncio.create_task(self._hold(next(sources))) for _ in range(self.count)]
        await self._stopping.wait()
        for task in holders:
            task.cancel()
        await asyncio.gather(*holders, return_exceptions=True)

    def _add(self, **deltas: int) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self.counts, name, getattr(self.counts, name) + delta)

    async def _hold(self, source: str) -> None:
        while True:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    reader, writer = await asyncio.open_connection(
                        self.host, self.port, local_addr=(source, 0))
            except (OSError, TimeoutError):
                self._add(failed=1)
                await asyncio.sleep(self.reconnect_s)
                continue
            self._add(open=1, opened=1)
            try:
                await self._trickle(reader, writer)
            finally:
                self._add(open=-1)
                writer.transport.abort()
            self._add(closed_by_server=1)
            await asyncio.sleep(self.reconnect_s)

    async def _trickle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Returns when the server closed the connection."""
        writer.write(PARTIAL_HEAD)
        while True:
            try:
                async with asyncio.timeout(self.trickle_s):
                    if not await reader.read(4096):
                        return
            except TimeoutError:
                pass
            except OSError:
                return
            try:
                writer.write(b"x")
                await writer.drain()
            except OSError:
                return
