"""Slow and numerous clients cannot hold the dashboard: a real DashboardService on port 0,
raw sockets from several loopback addresses (127.0.0.0/8 is all loopback on Linux), small
caps and a short header timeout.

A connection that never completes its request head is closed after the header timeout, also
when it trickles bytes, and also when it is a kept-alive connection trickling its second
request; one that does not read its answers is closed too; over a cap the oldest connection
that owes a head gives way, and when every connection is busy (event streams) the newcomer is
closed unread; an event stream outlives the header timeout; a normal request is answered
throughout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from soulflow.backends.file.backend import FileBackend
from soulflow.bus.bus import MessageBus
from soulflow.channels.local.adapter import LocalChannel
from soulflow.dashboard import service as service_module
from soulflow.dashboard.connections import ConnectionLimits, address_key
from soulflow.dashboard.listener import IN_FLIGHT
from soulflow.dashboard.service import DashboardService
from soulflow.events.hub import EventHub
from tests.waiting import until


async def _ok_state() -> dict[str, bool]:
    return {"ok": True}


HEADER_TIMEOUT_S = 0.5
PARTIAL_HEAD = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "  # no blank line yet
WAIT_S = 20.0  # a fail-safe for every wait below, never a bound on how long things take

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@dataclass
class Rig:
    service: DashboardService
    hub: EventHub
    http: httpx.AsyncClient

    @property
    def port(self) -> int:
        assert self.service.bound_port is not None
        return self.service.bound_port

    async def connect(self, source: str = "127.0.0.1") -> Stream:
        return await asyncio.open_connection("127.0.0.1", self.port, local_addr=(source, 0))

    async def healthy(self) -> None:
        """A normal request, on a fresh connection from the usual address, is answered."""
        response = await self.http.get("/healthz")
        assert response.status_code == 200 and response.json()["ok"] is True


@contextlib.asynccontextmanager
async def running(tmp_path: Path, limits: ConnectionLimits) -> AsyncIterator[Rig]:
    bus = MessageBus(FileBackend(tmp_path / "runtime", node_id="test"))
    hub = EventHub()
    service = DashboardService(host="127.0.0.1", port=0, token="", hub=hub,
                               state=_ok_state,
                               local=LocalChannel(tmp_path / "runtime" / "local"), bus=bus,
                               ready=lambda: True, limits=limits)
    await service.start()
    # a fresh connection per request: the client's own keep-alive is not what is tested
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.bound_port}",
                                 timeout=10, limits=httpx.Limits(max_keepalive_connections=0)
                                 ) as http:
        try:
            yield Rig(service, hub, http)
        finally:
            await service.stop()
            await bus.stop(1)
            await bus.backend.stop()


async def until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sent before it closed the connection."""
    received = b""
    async with asyncio.timeout(WAIT_S):
        while True:
            try:
                chunk = await reader.read(65536)
            except ConnectionResetError:
                return received
            if not chunk:
                return received
            received += chunk


async def response_head(reader: asyncio.StreamReader) -> bytes:
    async with asyncio.timeout(WAIT_S):
        return await reader.readuntil(b"\r\n\r\n")


async def read_response(reader: asyncio.StreamReader) -> bytes:
    """One whole response with a Content-Length body."""
    head = await response_head(reader)
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    async with asyncio.timeout(WAIT_S):
        return head + await reader.readexactly(length)


async def trickle(writer: asyncio.StreamWriter, data: bytes, period: float = 0.05) -> None:
    """Send `data` a byte at a time (a client's pace, not a wait) until the server hangs up."""
    for byte in data * 100:
        try:
            writer.write(bytes([byte]))
            await writer.drain()
        except (ConnectionError, RuntimeError):
            return
        await asyncio.sleep(period)


def get(path: str, rig: Rig) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{rig.port}\r\n\r\n".encode()


async def test_a_connection_that_never_finishes_its_head_is_closed_after_the_timeout(
        tmp_path: Path) -> None:
    async with running(tmp_path, ConnectionLimits(header_timeout_s=HEADER_TIMEOUT_S)) as rig:
        loop = asyncio.get_running_loop()
        silent, partial, trickling = [await rig.connect() for _ in range(3)]
        opened = loop.time()
        partial[1].write(PARTIAL_HEAD)
        trickler = asyncio.create_task(trickle(trickling[1], PARTIAL_HEAD))
        await rig.healthy()  # answered while the three hang around
        for reader, _ in (silent, partial, trickling):
            assert await until_closed(reader) == b""  # closed, and nothing was answered
        assert loop.time() - opened >= HEADER_TIMEOUT_S * 0.9
        await trickler
        assert rig.service.gate.counts.timeout == 3
        await until(lambda: rig.service.gate.counts.open == 0, WAIT_S)
        await rig.healthy()


async def test_a_kept_alive_connection_trickling_its_next_request_is_closed(
        tmp_path: Path) -> None:
    async with running(tmp_path, ConnectionLimits(header_timeout_s=HEADER_TIMEOUT_S)) as rig:
        reader, writer = await rig.connect()
        writer.write(get("/healthz", rig))
        first = await read_response(reader)
        assert first.startswith(b"HTTP/1.1 200")
        loop = asyncio.get_running_loop()
        started = loop.time()
        trickler = asyncio.create_task(trickle(writer, PARTIAL_HEAD))
        assert await until_closed(reader) == b""  # no second answer: closed mid-head
        assert loop.time() - started >= HEADER_TIMEOUT_S * 0.9
        await trickler
        assert rig.service.gate.counts.timeout == 1
        await rig.healthy()


async def test_an_idle_kept_alive_connection_is_closed_after_the_idle_timeout(
        tmp_path: Path) -> None:
    limits = ConnectionLimits(header_timeout_s=HEADER_TIMEOUT_S, idle_timeout_s=1.0)
    async with running(tmp_path, limits) as rig:
        reader, writer = await rig.connect()
        writer.write(get("/healthz", rig))
        await read_response(reader)
        loop = asyncio.get_running_loop()
        answered = loop.time()
        assert await until_closed(reader) == b""
        assert loop.time() - answered >= 0.9


async def test_a_client_that_does_not_read_its_answers_is_closed(tmp_path: Path) -> None:
    limits = ConnectionLimits(header_timeout_s=HEADER_TIMEOUT_S, idle_timeout_s=1.0)
    async with running(tmp_path, limits) as rig:
        loop = asyncio.get_running_loop()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window, unread
        sock.bind(("127.0.0.5", 0))
        sock.setblocking(False)
        await loop.sock_connect(sock, ("127.0.0.1", rig.port))
        reader, writer = await asyncio.open_connection(sock=sock)
        # pipelined: ~6 MB of answers, more than the kernel buffers (4 MB at most) take
        writer.write(get("/static/app.js", rig) * 500)
        await until(lambda: rig.service.gate.counts.timeout == 1, WAIT_S)
        assert rig.service.gate.counts.open == 0
        received = await until_closed(reader)  # what got through before the abort
        assert received.count(b"HTTP/1.1 200") < 500
        await rig.healthy()


async def test_over_the_address_cap_the_oldest_slow_connection_gives_way(
        tmp_path: Path) -> None:
    limits = ConnectionLimits(max_per_address=3, header_timeout_s=30)
    async with running(tmp_path, limits) as rig:
        slow = [await rig.connect("127.0.0.4") for _ in range(3)]
        for _, writer in slow:
            writer.write(PARTIAL_HEAD)
        await until(lambda: rig.service.gate.counts.open == 3, WAIT_S)
        reader, writer = await rig.connect("127.0.0.4")  # the same address, a real request
        writer.write(get("/healthz", rig))
        assert (await read_response(reader)).startswith(b"HTTP/1.1 200")
        assert await until_closed(slow[0][0]) == b""  # the oldest slow one made room
        counts = rig.service.gate.counts
        assert counts.evicted == 1 and counts.refused == 0 and counts.open == 3
        await rig.healthy()  # another address is not affected at all


async def test_event_streams_stay_open_and_a_newcomer_is_refused_when_all_are_busy(
        tmp_path: Path) -> None:
    limits = ConnectionLimits(max_per_address=2, header_timeout_s=HEADER_TIMEOUT_S)
    async with running(tmp_path, limits) as rig:
        streams = [await rig.connect("127.0.0.3") for _ in range(2)]
        for reader, writer in streams:
            writer.write(get("/api/events", rig))
            assert b"text/event-stream" in await response_head(reader)
        reader, writer = await rig.connect("127.0.0.3")
        writer.write(get("/healthz", rig))
        assert await until_closed(reader) == b""  # refused unread: both streams are busy
        assert rig.service.gate.counts.refused == 1
        await rig.healthy()  # from another address
        # a slow connection opened after the streams is closed for its missing head ...
        slow_reader, _ = await rig.connect()
        assert await until_closed(slow_reader) == b""
        # ... while the streams, older than that, still carry events
        rig.hub.publish("operator.action", {"action": "test", "target": "after-timeout"})
        for reader, _ in streams:
            async with asyncio.timeout(WAIT_S):
                assert b"after-timeout" in await reader.readuntil(b"after-timeout")
        assert rig.service.gate.counts.open == 2


async def test_many_slow_connections_stay_within_the_caps_and_are_all_closed(
        tmp_path: Path) -> None:
    limits = ConnectionLimits(max_open=24, max_per_address=4, header_timeout_s=1.0)
    async with running(tmp_path, limits) as rig:
        gate = rig.service.gate
        highest = 0

        def watch() -> bool:
            nonlocal highest
            highest = max(highest, gate.counts.open)
            return False

        held: list[Stream] = []
        for n in range(200):  # 20 addresses, 10 each: over both caps
            held.append(await rig.connect(f"127.0.1.{n % 20 + 1}"))
            held[-1][1].write(PARTIAL_HEAD[: n % len(PARTIAL_HEAD)])
            watch()
        await rig.healthy()  # a normal request gets in (a slow connection gives way)
        assert highest <= limits.max_open
        await until(lambda: watch() or gate.counts.open == 0, WAIT_S)
        assert highest <= limits.max_open
        for reader, _ in held:
            assert await until_closed(reader) == b""
        counts = gate.counts
        assert counts.evicted >= 200 - limits.max_open
        assert counts.evicted + counts.timeout >= 200
        for _, writer in held:
            writer.close()
        await rig.healthy()


def test_limits_are_clamped_to_half_the_open_files_limit_less_what_is_in_flight() -> None:
    fitted, notes = ConnectionLimits(max_open=5000, max_per_address=2000).within(4096, 384)
    assert (fitted.max_open, fitted.max_per_address) == (1664, 1664)
    assert len(notes) == 2 and "DASHBOARD_MAX_CONNECTIONS=5000" in notes[0]
    same, none = ConnectionLimits().within(4096, 384)
    assert same == ConnectionLimits() and none == []
    small, _ = ConnectionLimits().within(1024, 384)
    assert (small.max_open, small.max_per_address) == (128, 32)
    longer, _ = ConnectionLimits(header_timeout_s=60).within(1 << 20)
    assert longer.idle_timeout_s == 60  # idle never shorter than the head's allowance


async def test_the_dashboard_says_when_it_clamps_its_caps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(service_module.resource, "getrlimit", lambda which: (2048, 2048))
    caplog.set_level(logging.INFO, "soulflow.dashboard")
    async with running(tmp_path, ConnectionLimits(max_open=1000)) as rig:
        assert rig.service.gate.limits.max_open == 1024 - IN_FLIGHT
        await rig.healthy()
    assert f"using {1024 - IN_FLIGHT}" in caplog.text and "open-files limit 2048" in caplog.text


def test_addresses_are_counted_by_host_and_ipv6_by_its_64() -> None:
    assert address_key(("192.0.2.7", 5555)) == "192.0.2.7"
    assert address_key(("::ffff:192.0.2.7", 5555, 0, 0)) == "192.0.2.7"
    assert address_key(("2001:db8:1:2:aaaa::1", 1, 0, 0)) == \
        address_key(("2001:db8:1:2:bbbb::9", 1, 0, 0)) == "2001:db8:1:2::/64"
    assert address_key(("::1", 1, 0, 0)) == "::1"


def test_the_daemon_raises_its_soft_open_files_limit_to_the_hard_one() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip("the hard open-files limit is too low to lower the soft one below it")
    script = ("import resource\n"
              "from soulflow.runtime.open_files import raise_open_files_limit\n"
              "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n"
              "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
              "limit = raise_open_files_limit()\n"
              "print(limit.before, limit.soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    before, soft, now = map(int, done.stdout.split())
    assert before == 256 and soft == now > 256
    if hard != resource.RLIM_INFINITY:
        assert now == hard
