"""Marking a reply in flight keeps what the outbox knows of its tries (on Redis one script,
from the partition this node remembers for the message), on every backend; a reply sent or
buried by another node meanwhile is refused, and its partition is not left busy."""

from __future__ import annotations

from soulflow.backends.redis.backend import RedisBackend
from tests.backends.conftest import Harness
from tests.backends.helpers import outbound


async def test_sending_keeps_attempts_next_try_and_error(harness: Harness) -> None:
    backend = await harness.open()
    reply = outbound("a", "retry me")
    await backend.outbox.put(reply)
    error = "502 bad gateway | upstream said:\nretry later"
    await backend.outbox.record_attempt(reply.message_id, 3, 1795000000.5, error)
    assert await backend.outbox.record_sending(reply.message_id)
    backend = await harness.reopen(backend)  # as the contract suite reads the mark back
    entry = await backend.outbox.get(reply.message_id)
    assert entry is not None
    assert (entry.attempts, entry.next_at, entry.last_error, entry.in_flight) == \
        (3, 1795000000.5, error, True)
    await backend.outbox.mark_sent(reply.message_id)
    assert await backend.outbox.get(reply.message_id) is None
    assert await backend.outbox.count() == 0


async def test_a_reply_sent_by_another_node_meanwhile_is_refused(
        redis_harness: Harness) -> None:
    node = await redis_harness.open("node-a", partitions=1)
    assert isinstance(node, RedisBackend)
    reply = outbound("c1", "hello")
    await node.outbox.put(reply)  # this node remembers the reply's partition
    other = await redis_harness.open("node-b", partitions=1)
    await other.outbox.mark_sent(reply.message_id)  # e.g. sent before a takeover settled
    assert not await node.outbox.record_sending(reply.message_id)
    assert not node.outbox.busy(0)
    assert await node.outbox.get(reply.message_id) is None
