"""An answer is stored only by the node holding its chat (Redis): a node that lost the chat
while its turn ran must not queue the answer, since the chat's new holder runs that message
again and could otherwise send a later answer first (seen after a Redis restart mid-flood)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from soulflow.backends.base import Completing, Completion
from soulflow.backends.redis import outbox as outbox_module
from soulflow.backends.redis.backend import RedisBackend
from soulflow.errors import StoreUnavailable
from tests.backends.conftest import Harness
from tests.backends.helpers import inbound, outbound


async def test_only_the_chats_holder_stores_an_answer(redis_harness: Harness) -> None:
    holder = await redis_harness.open("node-a", partitions=1)
    other = await redis_harness.open("node-b", partitions=1)
    assert holder.owns("telegram:c1") and not other.owns("telegram:c1")
    late = outbound("c1", "late answer", inbound_key="telegram:c1:1")
    assert not await other.outbox.put(late)  # the chat is node-a's: refused
    assert not await other.outbox.has_answered("telegram:c1:1")
    assert await holder.outbox.put(outbound("c1", "answer", inbound_key="telegram:c1:1"))
    # a message that answers nothing (a refusal at intake, by the account's reader) is
    # stored by any node and sent by the chat's holder
    assert await other.outbox.put(outbound("c1", "you are not on the allow-list"))
    assert [e.message.content for e in await holder.outbox.pending()] == \
        ["answer", "you are not on the allow-list"]


async def test_an_answer_under_a_lease_replaced_in_redis_is_refused(
        redis_harness: Harness) -> None:
    """The check is in the storing script too: this node still believes it holds the lease
    (its local deadline has not passed) but Redis has it under another holder's token."""
    node = await redis_harness.open("node-a", partitions=1)
    assert isinstance(node, RedisBackend) and node.owns("telegram:c1")
    await node.client.set(node.keys.lease(node.keys.partition_lease(0)), "node-b|999")
    assert not await node.outbox.put(outbound("c1", "answer", inbound_key="telegram:c1:1"))
    assert await node.outbox.count() == 0


async def test_an_answer_refused_once_the_lease_lapsed_here_leaves_its_message_pending(
        redis_harness: Harness) -> None:
    """This node's own deadline for the lease passed (Redis was away a while) though Redis
    still has the lease under its token: the answer is refused, so the message must not be
    completed either, or nobody ever answers it. The chat's next holder runs it again."""
    node = await redis_harness.open("node-a", partitions=1)
    assert isinstance(node, RedisBackend)
    assert await node.inbound.accept(inbound("c1", 1))
    [message] = await node.inbound.claim()
    lease = node.partitions._held[0]
    node.partitions._held[0] = replace(lease, deadline=0.0)  # lapsed here, not in Redis
    assert not await node.outbox.put(outbound("c1", "answer", inbound_key=message.key))
    assert await node.inbound.complete(message.key, "answered") is Completion.FENCED
    node.partitions._held[0] = lease
    await redis_harness.close(node)  # hands the chat over
    other = await redis_harness.open("node-b", partitions=1)
    assert [m.key for m in await other.inbound.claim()] == [message.key]
    assert not await other.outbox.has_answered(message.key)  # it answers it


async def test_a_batch_tried_again_after_its_chat_moved_leaves_the_message_pending(
        redis_harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """The outbox line's batch (a reply and its completion) did not reach Redis; by the next
    try the chat's lease is another node's. The reply is refused, and the completion must
    still be fenced by the lease the message was claimed under, not run without one, or the
    message would be finished unanswered (seen once in 20 Redis restarts mid-flood)."""
    node = await redis_harness.open("node-a", partitions=1)
    assert isinstance(node, RedisBackend)
    assert await node.inbound.accept(inbound("c1", 1))
    [message] = await node.inbound.claim()
    writes = [outbound("c1", "answer", inbound_key=message.key),
              Completing((message.key,), "answered")]

    async def not_sent(*args: object, **kwargs: object) -> list[object]:
        monkeypatch.undo()
        raise StoreUnavailable("Connection refused")

    monkeypatch.setattr(outbox_module, "run_in_order", not_sent)
    with pytest.raises(StoreUnavailable):
        await node.outbox.store(writes)
    await node.client.set(node.keys.lease(node.keys.partition_lease(0)), "node-b|999")
    assert await node.outbox.store(writes) == [False, [Completion.FENCED]]
    assert await node.inbound.pending_count() == 1  # the chat's new holder runs it
    assert not await node.outbox.has_answered(message.key)
