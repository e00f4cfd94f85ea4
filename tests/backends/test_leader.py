"""Leader leases for platform accounts: one reader per account, takeover when it dies or is
cut off, and a cut-off leader steps down before anyone else can take over."""

from __future__ import annotations

import time

from soulflow.backends.leader import LeaderElection
from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.keys import Keys
from soulflow.backends.redis.lease import RedisLeases
from tests.backends.conftest import Harness
from tests.backends.helpers import eventually
from tests.backends.proxy import CuttableProxy
from tests.backends.redis_server import RedisServer


async def test_one_leader_and_a_clean_handover(harness: Harness) -> None:
    backend = await harness.open()
    changes: list[tuple[str, bool]] = []
    first = LeaderElection(backend.leases, "account:telegram", "node-a", ttl_s=1.0,
                           on_change=lambda up: changes.append(("a", up)))
    second = LeaderElection(backend.leases, "account:telegram", "node-b", ttl_s=1.0,
                            on_change=lambda up: changes.append(("b", up)))
    first.start()

    async def first_leads() -> bool:
        return first.is_leader

    await eventually(first_leads, what="node-a to lead")
    second.start()
    try:
        for _ in range(3):  # several renewal rounds: the leader keeps it, the other waits
            await first.step()
            await second.step()
            assert first.is_leader and not second.is_leader
        await first.stop()

        async def second_leads() -> bool:
            return second.is_leader

        await eventually(second_leads, what="node-b to take over")
        assert second.lease is not None and second.lease.token > 1
    finally:
        await first.stop()
        await second.stop()
    assert changes == [("a", True), ("a", False), ("b", True), ("b", False)]


async def test_a_leader_cut_off_from_redis_steps_down_before_the_takeover(
        redis_server: RedisServer) -> None:
    proxy = CuttableProxy(redis_server.port)
    await proxy.start()
    keys = Keys("leader-cut:", 1)
    cut_client = AsyncStoreRedis.from_url(proxy.url, socket_timeout=30)  # hangs, never fails
    direct = AsyncStoreRedis.from_url(redis_server.url)
    lost_at: list[float] = []
    taken_at: list[float] = []
    ttl = 1.2
    cut = LeaderElection(RedisLeases(cut_client, keys), "account:telegram", "cut", ttl_s=ttl,
                         on_change=lambda up: None if up else lost_at.append(time.monotonic()))
    other = LeaderElection(RedisLeases(direct, keys), "account:telegram", "other", ttl_s=ttl,
                           on_change=lambda up: taken_at.append(time.monotonic()) if up else None)
    cut.start()
    try:
        async def cut_leads() -> bool:
            return cut.is_leader

        await eventually(cut_leads, what="the soon-cut node to lead")
        other.start()
        proxy.blackhole()

        async def other_leads() -> bool:
            return other.is_leader

        await eventually(other_leads, what="the other node to take over")
        assert lost_at and taken_at
        assert lost_at[0] < taken_at[0]  # never two leaders at once
        assert not cut.is_leader
    finally:
        await other.stop()
        await cut.stop()  # its release times out on the cut link; the lease expires anyway
        await proxy.close()
        await cut_client.aclose()
        await direct.aclose()
