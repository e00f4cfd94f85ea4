"""The bus's Redis connections write under a timeout scope of the caller's task, not a task
of their own: the bound on a stuck write still holds, a cut-off write never leaves its
connection in the pool, and every URL scheme gets a connection of the right kind."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.connections import lean_connection_class
from soulflow.errors import StoreUnavailable
from tests.backends.proxy import CuttableProxy
from tests.backends.redis_server import RedisServer

# far more than the kernel buffers both ends of a loopback socket hold
_STUCK_VALUE = b"x" * (48 * 1024 * 1024)


@pytest.mark.parametrize("url, base", [
    ("redis://127.0.0.1:6379/0", Connection),
    ("rediss://127.0.0.1:6379/0", SSLConnection),
    ("unix:///run/redis.sock", UnixDomainSocketConnection),
])
def test_every_url_scheme_keeps_its_kind_of_connection(url: str, base: type) -> None:
    client = AsyncStoreRedis.from_url(url, socket_timeout=1)
    chosen = client.connection_pool.connection_class
    assert issubclass(chosen, base) and chosen is not base
    assert lean_connection_class(chosen) is chosen  # already lean: kept


async def test_a_command_is_written_from_the_callers_own_task(redis_server: RedisServer,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              ) -> None:
    client = AsyncStoreRedis.from_url(redis_server.url, socket_timeout=2)
    writers: list[asyncio.Task[object] | None] = []
    lean = client.connection_pool.connection_class
    original = lean._send_packed_command

    async def spying(self: Connection, command: list[bytes]) -> None:
        writers.append(asyncio.current_task())
        await original(self, command)

    monkeypatch.setattr(lean, "_send_packed_command", spying)
    try:
        await client.ping()  # connects on redis-py's own path
        writers.clear()
        assert await client.set("lean:k", "v")
        assert await client.get("lean:k") == b"v"
        assert writers == [asyncio.current_task()] * 2
    finally:
        await client.aclose()


async def test_a_stuck_write_times_out_and_its_connection_is_not_reused(
        redis_server: RedisServer) -> None:
    proxy = CuttableProxy(redis_server.port)
    await proxy.start()
    client = AsyncStoreRedis.from_url(proxy.url, socket_timeout=0.5,
                                      retry=Retry(NoBackoff(), 0))
    try:
        assert await client.set("lean:before", "1")
        proxy.blackhole()  # Redis stops reading: the socket's buffers fill up
        started = asyncio.get_running_loop().time()
        with pytest.raises(StoreUnavailable, match="Timeout writing"):
            await client.set("lean:stuck", _STUCK_VALUE)
        assert asyncio.get_running_loop().time() - started < 5
        proxy.restore()
        # the half-written command died with its connection: the next one reads its own answer
        assert await client.get("lean:before") == b"1"
    finally:
        await client.aclose()
        await proxy.close()
