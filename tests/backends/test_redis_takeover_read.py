"""A partition taken over in the middle of a claim: the dead holder's unfinished entries must
be handed out before anything new read from the stream.

Seen in the three-daemon flood under load (1 run in about 20): a node's claim found no fresh
partition, then awaited Redis (the unsure-read recovery, the sweep); meanwhile its lease loop
took over a dead node's partition. The same claim then read that partition's stream (`>`) and
handed out the chat's next message, while the message the dead node had read and never
finished was reclaimed only by the next claim: the chat was answered `m1` before `m0`."""

from __future__ import annotations

import asyncio

from soulflow.backends.redis.backend import RedisBackend
from tests.backends.conftest import Harness
from tests.backends.helpers import inbound


def _redis(backend: object) -> RedisBackend:
    assert isinstance(backend, RedisBackend)
    return backend


async def _stop_lease_loop(node: RedisBackend) -> None:
    """No more lease rounds in the background: the test drives them (or, for a dead node,
    nobody does)."""
    task = node._task
    assert task is not None
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    node._task = None  # its stop() has no loop to wait for


async def test_a_partition_taken_during_a_claim_hands_out_the_old_holders_entries_first(
        redis_harness: Harness) -> None:
    dead = _redis(await redis_harness.open("node-a", lease_ttl_s=1.0, partitions=1))
    heir = _redis(await redis_harness.open("node-b", lease_ttl_s=1.0, partitions=1))
    await _stop_lease_loop(heir)
    assert dead.partitions.held() == [0] and heir.partitions.held() == []
    first, second = inbound("c1", 0), inbound("c1", 1)
    assert await dead.inbound.accept(first)
    assert [m.key for m in await dead.inbound.claim()] == [first.key]  # read, never finished
    await _stop_lease_loop(dead)  # node A dies: its lease runs out
    await dead.client.delete(dead.keys.lease(dead.keys.partition_lease(0)))
    assert await heir.inbound.accept(second)

    real_sweep = heir.inbound._sweep

    async def lease_round_meanwhile(node: str) -> None:
        await heir.partitions.rebalance()  # the lease loop takes partition 0 right now
        assert heir.partitions.held() == [0]
        await real_sweep(node)

    heir.inbound._sweep = lease_round_meanwhile  # type: ignore[method-assign]
    handed: list[str] = []
    for _ in range(3):
        handed += [m.key for m in await heir.inbound.claim()]
    assert handed == [first.key, second.key]
