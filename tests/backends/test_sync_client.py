"""The synchronous Redis client's breaker: Redis away costs the event loop one timeout per
cooldown, not one per call (the stores call it one after another on the loop).

The calls run in a worker thread here because the blackholing proxy lives on this test's
event loop; in the daemon they run on the loop itself, which is what the breaker protects.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from soulflow.backends.redis.clients import SyncStoreRedis
from soulflow.backends.redis.sync_client import sync_client
from soulflow.errors import StoreError, StoreUnavailable
from tests.backends.proxy import CuttableProxy
from tests.backends.redis_server import RedisServer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def outcome(client: SyncStoreRedis) -> str:
    """What one call ended with: the value, the breaker's refusal, or a network failure (both
    `StoreUnavailable`: no redis exception leaves the client)."""
    try:
        return str(client.get("k"))
    except StoreUnavailable as exc:
        return "breaker" if "not trying again" in str(exc) else "network"


@contextmanager
def own_redis(tmp_path: Path,
              **client_settings: Any) -> Iterator[tuple[RedisServer, SyncStoreRedis]]:
    """A redis-server of this test's own (stopped and started by the test) and a client on
    it; both closed on the way out."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    client = sync_client(server.url, **client_settings)
    try:
        yield server, client
    finally:
        client.close()
        server.stop()


@pytest.fixture
async def proxy(redis_server: RedisServer) -> AsyncIterator[CuttableProxy]:
    cut = CuttableProxy(redis_server.port)
    await cut.start()
    yield cut
    await cut.close()


async def test_a_cut_off_redis_is_tried_once_per_cooldown(proxy: CuttableProxy) -> None:
    clock = Clock()
    client = sync_client(proxy.url, timeout_s=0.3, cooldown_s=5.0, clock=clock)
    await asyncio.to_thread(client.set, "k", "v")
    assert await asyncio.to_thread(outcome, client) == "b'v'"
    proxy.blackhole()
    assert await asyncio.to_thread(outcome, client) == "network"  # waited for its timeout
    for _ in range(5):  # the turn's next calls: refused at once, the network is not touched
        assert await asyncio.to_thread(outcome, client) == "breaker"
    clock.now += 5.0
    assert await asyncio.to_thread(outcome, client) == "network"  # one try per cooldown
    assert await asyncio.to_thread(outcome, client) == "breaker"
    client.close()


def test_calls_go_through_again_once_redis_answers(tmp_path: Path) -> None:
    clock = Clock()
    with own_redis(tmp_path, timeout_s=1.0, cooldown_s=3.0, clock=clock) as (server, client):
        client.set("k", "v")
        server.stop()
        assert outcome(client) == "network"
        assert outcome(client) == "breaker"
        server.start()
        assert outcome(client) == "breaker"  # until the cooldown has passed
        clock.now += 3.0
        assert outcome(client) == "None"  # back (empty: no persistence in this test)
        with pytest.raises(StoreError) as refused:  # the command's own error: Redis answered
            client.execute_command("NO-SUCH-COMMAND")
        assert not isinstance(refused.value, StoreUnavailable)
        assert outcome(client) == "None"
        pipe = client.pipeline(transaction=True)
        pipe.set("k", "w")
        pipe.get("k")
        assert pipe.execute() == [True, b"w"]


def test_without_a_cooldown_every_call_tries(tmp_path: Path) -> None:
    with own_redis(tmp_path, timeout_s=1.0) as (server, client):
        server.stop()
        assert [outcome(client) for _ in range(3)] == ["network"] * 3


def test_a_restarted_redis_costs_no_failed_call(tmp_path: Path) -> None:
    """The pooled connection of a restarted Redis is closed by the server; the next call must
    go through on a fresh connection, not fail the turn that makes it (nor open the breaker)."""
    with own_redis(tmp_path, timeout_s=1.0, cooldown_s=3.0, clock=Clock()) as (server, client):
        client.set("k", "v")
        server.stop()
        server.start()
        assert outcome(client) == "None"  # empty: no persistence in this test
        pipe = client.pipeline(transaction=True)
        server.stop()
        server.start()
        pipe.set("k", "w")
        pipe.get("k")
        assert pipe.execute() == [True, b"w"]


def test_redis_errors_leave_the_clients_as_store_errors(tmp_path: Path) -> None:
    """Every Redis error is mapped where it enters: Redis away (a refused connection, a
    pipeline on a stopped server, a transaction's watch) is `StoreUnavailable`, Redis saying
    no is `StoreError`; a script still reloads itself after a SCRIPT FLUSH (its NoScriptError
    is redis-py's to handle, not mapped), and `transaction()` still retries a changed key."""
    with own_redis(tmp_path, timeout_s=1.0) as (server, client):
        script = client.register_script("return redis.call('INCR', KEYS[1])")
        assert script(keys=["n"]) == 1
        client.script_flush()
        assert script(keys=["n"]) == 2
        client.set("w", "1")
        tries: list[int] = []

        def bump(pipe: Any) -> None:
            value = int(pipe.get("w"))
            tries.append(value)
            if len(tries) == 1:
                client.set("w", "5")  # changed under the watch: the transaction runs again
            pipe.multi()
            pipe.set("w", value + 1)

        client.transaction(bump, "w")
        assert tries == [1, 5] and client.get("w") == b"6"
        with pytest.raises(StoreError) as wrong:
            client.lpush("w", "x")  # WRONGTYPE
        assert not isinstance(wrong.value, StoreUnavailable) and "WRONGTYPE" in str(wrong.value)
        server.stop()
        with pytest.raises(StoreUnavailable):
            client.get("k")
        pipe = client.pipeline(transaction=True)
        pipe.set("k", "v")
        with pytest.raises(StoreUnavailable):
            pipe.execute()
        with pytest.raises(StoreUnavailable):
            client.transaction(bump, "w")


async def test_the_async_client_maps_redis_errors_too(tmp_path: Path) -> None:
    from soulflow.backends.redis.backend import client_for

    server = RedisServer(tmp_path / "redis")
    server.start()
    client = client_for(server.url, timeout_s=1.0, socket_timeout_s=1.0)
    try:
        await client.set("w", "1")
        with pytest.raises(StoreError) as wrong:
            await client.lpush("w", "x")
        assert not isinstance(wrong.value, StoreUnavailable)
        server.stop()
        with pytest.raises(StoreUnavailable):
            await client.get("w")
        async with client.pipeline(transaction=False) as pipe:
            pipe.get("w")
            with pytest.raises(StoreUnavailable):
                await pipe.execute()
    finally:
        await client.aclose()
        server.stop()
