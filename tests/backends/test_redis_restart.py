"""Redis itself restarted (kill -9, AOF with `appendfsync always`) while a node holds work:
the node stops taking work while Redis is gone, keeps what it holds, reconnects, and nothing
accepted is lost or handed out twice."""

from __future__ import annotations

from soulflow.backends.base import Completion
from soulflow.backends.leader import LeaderElection
from soulflow.backends.redis.backend import RedisBackend
from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.keys import Keys
from soulflow.backends.redis.lease import RedisLeases
from tests.backends.helpers import eventually, inbound
from tests.backends.redis_server import RedisServer


async def test_nothing_is_lost_across_a_redis_restart(durable_redis: RedisServer) -> None:
    node = RedisBackend(AsyncStoreRedis.from_url(durable_redis.url, socket_timeout=2), node_id="n1",
                        prefix="restart:", partitions=2, lease_ttl_s=1.5)
    await node.start()
    try:
        messages = [inbound(f"chat{c}", n) for n in range(5) for c in range(2)]
        for message in messages:
            assert await node.inbound.accept(message)
        in_hand = await node.inbound.claim(limit=4)
        assert len(in_hand) == 4

        durable_redis.stop()  # kill -9

        async def stopped_taking_work() -> bool:
            return node.partitions.held() == []

        await eventually(stopped_taking_work, what="the node to give up its partitions")
        assert await node.inbound.claim() == []
        durable_redis.start()

        handed = [m.key for m in in_hand]

        async def resumed() -> bool:
            handed.extend(m.key for m in await node.inbound.claim())
            return len(handed) >= len(messages)

        await eventually(resumed, timeout_s=20, what="the rest handed out after the restart")
        assert sorted(handed) == sorted(m.key for m in messages)  # each once, none lost
        for key in handed:
            assert await node.inbound.complete(key, "answered") is Completion.DONE
        assert await node.inbound.pending_count() == 0
        for message in messages:
            assert await node.inbound.is_seen(message.key)
    finally:
        await node.stop()


async def test_a_leader_steps_down_while_redis_is_away_and_leads_again(
        durable_redis: RedisServer) -> None:
    client = AsyncStoreRedis.from_url(durable_redis.url, socket_timeout=1)
    election = LeaderElection(RedisLeases(client, Keys("restart-leader:", 1)),
                              "account:telegram", "n1", ttl_s=1.5)
    election.start()
    try:
        async def leads() -> bool:
            return election.is_leader

        async def follows() -> bool:
            return not election.is_leader

        await eventually(leads, what="leadership")
        durable_redis.stop()
        await eventually(follows, what="stepping down while Redis is away")
        durable_redis.start()
        await eventually(leads, timeout_s=20, what="leadership again after the restart")
    finally:
        await election.stop()
        await client.aclose()
