"""A node's private partition (`node:<id>`): its local chats (`local:<chat>@<node>`) are run and
answered by that node only, and a node restarted with the same id takes them back at once.

The file backend has one node and owns every chat: the same assertions hold for it where they
concern one node."""

from __future__ import annotations

from soulflow.backends.base import Completion
from soulflow.backends.redis.backend import RedisBackend
from soulflow.backends.redis.keys import partition_of, private_part
from soulflow.backends.redis.runs import partition_fence
from tests.backends.conftest import Harness
from tests.backends.helpers import eventually, inbound, outbound


async def test_a_node_runs_and_answers_its_own_local_chat(harness: Harness) -> None:
    backend = await harness.open("node-a")
    message = inbound("dashboard@node-a", 1, provider="local")
    assert backend.owns(message.chat_key)
    assert await backend.inbound.accept(message)
    assert [m.key for m in await backend.inbound.claim()] == [message.key]
    reply = outbound("dashboard@node-a", "hi", inbound_key=message.key, provider="local")
    assert await backend.outbox.put(reply)
    assert [e.message.message_id for e in await backend.outbox.pending()] == [reply.message_id]
    assert await backend.inbound.complete(message.key, "answered") is Completion.DONE


async def test_only_the_named_node_claims_and_sends_a_local_chat(redis_harness: Harness) -> None:
    node_a = await redis_harness.open("node-a")
    node_b = await redis_harness.open("node-b")
    assert partition_of("local:dashboard@node-a", 4) == private_part("node-a")
    assert node_a.owns("local:dashboard@node-a") and not node_b.owns("local:dashboard@node-a")
    assert node_b.owns("local:dashboard@node-b") and not node_a.owns("local:dashboard@node-b")
    for_a = [inbound("dashboard@node-a", n, provider="local") for n in range(3)]
    for_b = [inbound("dashboard@node-b", n, provider="local") for n in range(3)]
    for message in for_a + for_b:
        assert await node_a.inbound.accept(message)  # whoever journals it, it stays pinned
    got_a = await node_a.inbound.claim(limit=100)
    got_b = await node_b.inbound.claim(limit=100)
    assert [m.key for m in got_a] == [m.key for m in for_a]
    assert [m.key for m in got_b] == [m.key for m in for_b]
    reply = outbound("dashboard@node-a", "hi", provider="local")
    await node_b.outbox.put(reply)
    assert [e.message.message_id for e in await node_a.outbox.pending()] == [reply.message_id]
    assert await node_b.outbox.pending() == []
    assert not await node_b.outbox.record_sending(reply.message_id)
    # the private partition never counts in the share of the shared ones
    await eventually(lambda: _shared(node_a, node_b), what="the shared partitions split")


async def _shared(*nodes: object) -> bool:
    helds = [set(n.partitions.held()) for n in nodes]  # type: ignore[attr-defined]
    return all(len(h) == 2 for h in helds) and set().union(*helds) == {0, 1, 2, 3}


async def test_a_restart_with_the_same_id_takes_its_local_chats_back_at_once(
        redis_harness: Harness) -> None:
    """The old process is not stopped (as after a SIGKILL, its lease still runs): the new one
    takes the private partition over with a newer token, is handed the message the old one
    had claimed, and the old one's completion is refused."""
    old = await redis_harness.open("node-a", lease_ttl_s=30.0)
    assert isinstance(old, RedisBackend)
    message = inbound("dashboard@node-a", 1, provider="local")
    await old.inbound.accept(message)
    assert [m.key for m in await old.inbound.claim()] == [message.key]
    old_token = old.partitions.lease(old.partitions.private).token  # type: ignore[union-attr]
    new = await redis_harness.open("node-a", lease_ttl_s=30.0)
    assert isinstance(new, RedisBackend)
    new_lease = new.partitions.lease(new.partitions.private)
    assert new_lease is not None and new_lease.token > old_token
    # run journals are written under the private lease's token: the new life's is newer
    assert partition_fence(new)("local:dashboard@node-a") == new_lease.token
    assert partition_fence(new)("local:dashboard@node-b") is None
    assert [m.key for m in await new.inbound.claim()] == [message.key]
    assert await old.inbound.complete(message.key, "answered") is Completion.FENCED
    assert await new.inbound.complete(message.key, "answered") is Completion.DONE
    # the old life notices at its next renewal and does not take the partition back
    await old.partitions.rebalance()
    assert old.partitions.lease(old.partitions.private) is None
    assert not old.owns("local:dashboard@node-a") and new.owns("local:dashboard@node-a")


async def test_another_nodes_local_chat_waits_for_that_node(redis_harness: Harness) -> None:
    """Node A is gone: its local message is not run by B, however long B holds everything."""
    node_a = await redis_harness.open("node-a", lease_ttl_s=1.0)
    message = inbound("dashboard@node-a", 1, provider="local")
    await node_a.inbound.accept(message)
    await redis_harness.close(node_a)
    node_b = await redis_harness.open("node-b", lease_ttl_s=1.0)
    await eventually(lambda: _holds_all(node_b), what="B to hold every shared partition")
    assert await node_b.inbound.claim(limit=100) == []
    assert not node_b.owns(message.chat_key)
    back = await redis_harness.open("node-a", lease_ttl_s=1.0)
    assert [m.key for m in await back.inbound.claim()] == [message.key]


async def _holds_all(node: object) -> bool:
    return node.partitions.held() == [0, 1, 2, 3]  # type: ignore[attr-defined]
