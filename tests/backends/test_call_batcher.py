"""Script calls many tasks make at once share round trips (`CallBatcher`), and each caller
still hears back about its own call only: its reply, its own error, or the batch not
reaching Redis; a caller that gives up leaves the others be."""

from __future__ import annotations

import asyncio

import pytest

from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.script_calls import CallBatcher, ScriptCall
from soulflow.errors import StoreError, StoreUnavailable
from tests.backends.helpers import counting_round_trips
from tests.backends.proxy import CuttableProxy
from tests.backends.redis_server import RedisServer

INCR = "return redis.call('INCRBY', KEYS[1], ARGV[1])"
WRONG = "return redis.call('LPUSH', KEYS[1], 'x')"  # on a string key: WRONGTYPE


def incr(key: str, by: int = 1) -> ScriptCall:
    return ScriptCall(INCR, [key], [by])


async def test_a_flood_of_callers_shares_round_trips_and_each_gets_its_reply(
        redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    client = AsyncStoreRedis.from_url(redis_server.url, socket_timeout=5)
    batcher = CallBatcher(client, "test:marks")
    try:
        await client.delete("batcher:n")
        await client.ping()
        sends = counting_round_trips(monkeypatch)
        replies = await asyncio.gather(*(batcher.call(incr("batcher:n")) for _ in range(2000)))
        assert sorted(replies) == list(range(1, 2001))
        assert len(sends) < 50  # thousands of calls, a handful of pipelines
        sender = batcher._sender
        assert await batcher.call(incr("batcher:n", 5)) == 2005  # idle again: goes at once,
        assert batcher._sender is sender  # from the caller's task, no sender started
    finally:
        await client.aclose()


async def test_a_calls_own_error_fails_that_caller_only(redis_server: RedisServer) -> None:
    client = AsyncStoreRedis.from_url(redis_server.url, socket_timeout=5)
    batcher = CallBatcher(client, "test:marks")
    try:
        await client.set("batcher:s", "a string")
        results = await asyncio.gather(
            batcher.call(incr("batcher:ok")), batcher.call(ScriptCall(WRONG, ["batcher:s"], [])),
            batcher.call(incr("batcher:ok")), return_exceptions=True)
        assert isinstance(results[1], StoreError) and "WRONGTYPE" in str(results[1])
        assert results[2] == results[0] + 1
    finally:
        await client.aclose()


async def test_a_batch_that_misses_redis_fails_each_caller_and_a_cancelled_one_goes_quietly(
        redis_server: RedisServer) -> None:
    proxy = CuttableProxy(redis_server.port)
    await proxy.start()
    client = AsyncStoreRedis.from_url(proxy.url, socket_timeout=0.5)
    batcher = CallBatcher(client, "test:marks")
    try:
        await client.ping()
        proxy.blackhole()
        calls = [asyncio.ensure_future(batcher.call(incr("batcher:cut"))) for _ in range(5)]
        await asyncio.sleep(0.05)
        calls[0].cancel()  # gives up waiting: the others still hear back
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert isinstance(results[0], asyncio.CancelledError)
        assert all(isinstance(r, StoreUnavailable) for r in results[1:])
        proxy.restore()
        assert await batcher.call(incr("batcher:after")) >= 1  # works again
    finally:
        await client.aclose()
        await proxy.close()
