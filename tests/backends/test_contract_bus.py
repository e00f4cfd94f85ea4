"""The bus over each backend (file and Redis), as the daemon runs it: the outbox writer and
dispatcher, the claim loop, a restart, and (Redis) replies moving with their chat's partition.
The same assertions run against both backends."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from dataclasses import dataclass, field

import pytest

from soulflow.backends.base import Backend, Completion
from soulflow.bus.bus import MessageBus
from soulflow.channels.registry import ChannelRegistry
from soulflow.contracts import InboundMessage, OutboundMessage, ReplyStatus, SendResult
from soulflow.conversation.claiming import ClaimLoop
from soulflow.conversation.replies import BusReplies
from tests.backends.conftest import Harness
from tests.backends.helpers import eventually, inbound, outbound


@dataclass
class Recorder:
    """A sender that records what it sent, per chat."""

    name: str = "telegram"
    sent: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    send_interval_s: float = 0.0

    async def send(self, message: OutboundMessage) -> SendResult:
        self.sent[message.chat_id].append(message.content)
        return SendResult(platform_message_ids=[f"p{sum(map(len, self.sent.values()))}"])


async def started_bus(backend: Backend, sender: Recorder) -> MessageBus:
    bus = MessageBus(backend)
    bus.bind_senders(lambda provider: sender if provider == sender.name else None)
    await bus.start()
    return bus


async def test_published_replies_are_stored_then_sent_in_order_per_chat(
        harness: Harness) -> None:
    backend, sender = await harness.open(), Recorder()
    bus = await started_bus(backend, sender)
    stored = [bus.publish_outbound(outbound(chat, f"{chat}{n}"))
              for n in range(5) for chat in ("a", "b")]
    assert await asyncio.gather(*stored) == [True] * 10  # in the outbox once awaited

    async def all_sent() -> bool:
        return sum(map(len, sender.sent.values())) == 10 and await backend.outbox.count() == 0

    await eventually(all_sent, what="every reply sent")
    assert sender.sent == {chat: [f"{chat}{n}" for n in range(5)] for chat in ("a", "b")}
    assert (await bus.refresh_stats()).outbox_pending == 0
    await bus.stop(1)


async def test_replies_left_in_the_outbox_are_sent_after_a_restart(harness: Harness) -> None:
    backend = await harness.open()
    for n in range(3):
        await backend.outbox.put(outbound("a", f"left {n}"))
    backend = await harness.reopen(backend)
    sender = Recorder()
    bus = await started_bus(backend, sender)

    async def sent() -> bool:
        return len(sender.sent["a"]) == 3

    await eventually(sent, what="the replies of the last run")
    assert sender.sent["a"] == ["left 0", "left 1", "left 2"]
    await bus.stop(1)


async def test_the_claim_loop_hands_each_message_once_and_a_restart_resumes_the_rest(
        harness: Harness) -> None:
    backend = await harness.open()
    taken: list[InboundMessage] = []

    async def take(message: InboundMessage) -> None:
        taken.append(message)

    loop = ClaimLoop(backend.inbound.claim, take, wait_s=0.05)
    task = asyncio.create_task(loop.run(), name="inbound:claim")
    messages = [inbound(chat, n) for n in range(3) for chat in ("a", "b")]
    for message in messages:
        assert await backend.inbound.accept(message)

    async def all_taken() -> bool:
        return len(taken) >= len(messages)

    await eventually(all_taken, what="every message claimed")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert await backend.inbound.claim(100) == []  # nothing is handed out twice
    assert sorted(m.key for m in taken) == sorted(m.key for m in messages)
    for chat in ("a", "b"):
        assert [m.message_id for m in taken if m.chat_id == chat] == ["0", "1", "2"]
    replies = BusReplies(ChannelRegistry(), MessageBus(backend), lambda kind, data: None)
    await replies.complete([m.key for m in taken[:4]], ReplyStatus.ANSWERED)
    unfinished = sorted(m.key for m in taken[4:])

    backend = await harness.reopen(backend)  # a new process: what was not completed comes back
    again = ClaimLoop(backend.inbound.claim, take, wait_s=0.05)
    taken.clear()
    assert await again.round() == 2
    assert sorted(m.key for m in taken) == unfinished
    assert await again.round() == 0


async def test_a_failing_claim_is_retried_and_logged_once(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    backend = await harness.open()
    failures = 3

    async def claim(limit: int, *, wait_s: float = 0.0) -> list[InboundMessage]:
        nonlocal failures
        if failures:
            failures -= 1
            raise ConnectionError("store unreachable")
        return await backend.inbound.claim(limit, wait_s=wait_s)

    taken: list[InboundMessage] = []

    async def take(message: InboundMessage) -> None:
        taken.append(message)

    await backend.inbound.accept(inbound("a", 1))
    loop = ClaimLoop(claim, take, wait_s=0.05, backoff=(0.001, 0.01))
    with caplog.at_level(logging.INFO, logger="soulflow.conversation.claiming"):
        task = asyncio.create_task(loop.run(), name="inbound:claim")

        async def recovered() -> bool:
            return bool(taken)

        await eventually(recovered, what="the message claimed after the failures")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    lines = [r.getMessage() for r in caplog.records if r.name == "soulflow.conversation.claiming"]
    assert len(lines) == 2, lines  # one when it started failing, one when it recovered
    assert "claiming work failed" in lines[0] and "claiming work again" in lines[1]


async def test_a_dead_nodes_queued_replies_are_sent_by_the_new_holder_of_their_chats(
        redis_harness: Harness) -> None:
    """Replies queued on node A (which has no channel to send them) move with their chats'
    partitions when A stops: node B's dispatcher queues them on the partitions change."""
    a = await redis_harness.open("node-a", lease_ttl_s=1.0, partitions=2)
    sender = Recorder()
    b = await redis_harness.open("node-b", lease_ttl_s=1.0, partitions=2)
    bus_b = await started_bus(b, sender)
    b.on_partitions_changed(bus_b.dispatcher.requeue_pending)
    bus_a = MessageBus(a)  # A never starts sending
    chats = [f"c{i}" for i in range(6)]
    for n in range(2):
        for chat in chats:
            assert await bus_a.publish_outbound(outbound(chat, f"{chat}-{n}"))
    await bus_a.stop(1)
    await redis_harness.close(a)  # a clean stop hands its partitions back

    async def all_sent() -> bool:
        return sum(map(len, sender.sent.values())) == 2 * len(chats)

    await eventually(all_sent, what="node B sending node A's replies")
    assert dict(sender.sent) == {chat: [f"{chat}-0", f"{chat}-1"] for chat in chats}
    assert b.status()["partitions"] == {"held": [0, 1], "total": 2}
    await bus_b.stop(1)


async def test_a_reply_the_new_holder_writes_waits_for_the_dead_nodes_older_ones(
        redis_harness: Harness) -> None:
    """The order race of a failover: node B takes over node A's chat, answers a newer message
    there and stores that reply while it is still reading the outbox for the replies A left
    behind. B's reply must not be sent before A's older one (here the read is held open until
    B's reply is stored; before the fix B sent it at once)."""
    a = await redis_harness.open("node-a", lease_ttl_s=1.0, partitions=2)
    b = await redis_harness.open("node-b", lease_ttl_s=1.0, partitions=2)
    sender = Recorder()
    bus_b = await started_bus(b, sender)
    b.on_partitions_changed(bus_b.dispatcher.requeue_pending)

    async def one_partition_each() -> bool:
        return all(len(node.status()["partitions"]["held"]) == 1 for node in (a, b))

    await eventually(one_partition_each, what="the two nodes sharing the partitions")
    chat = next(f"c{i}" for i in range(64) if a.owns(f"telegram:c{i}"))
    bus_a = MessageBus(a)  # A stores a reply and dies before sending it
    assert await bus_a.publish_outbound(outbound(chat, "older, from A"))
    await bus_a.stop(1)

    reading, gate = asyncio.Event(), asyncio.Event()
    read_pending = b.outbox.pending

    async def held_read() -> list:
        reading.set()
        await gate.wait()
        return await read_pending()

    b.outbox.pending = held_read  # type: ignore[method-assign]
    await redis_harness.close(a)  # hands its partitions back: B takes the chat
    await asyncio.wait_for(reading.wait(), 15)  # B is reading the outbox now
    assert b.owns(f"telegram:{chat}")
    assert await bus_b.publish_outbound(outbound(chat, "newer, from B"))  # stored, queued
    gate.set()

    async def both_sent() -> bool:
        return len(sender.sent[chat]) == 2

    await eventually(both_sent, what="both replies of the chat sent")
    assert sender.sent[chat] == ["older, from A", "newer, from B"]
    await bus_b.stop(1)


async def test_backend_status_and_ownership(harness: Harness) -> None:
    backend = await harness.open("node-a")
    status = backend.status()
    assert status["kind"] == harness.kind and status["node_id"] == "node-a"
    assert status["connected"] is True and status["since"] is None
    assert backend.owns("telegram:any-chat")  # the only node holds every partition
    assert await backend.inbound.complete("telegram:x:1", "answered") is Completion.UNKNOWN


async def test_the_stats_snapshot_follows_the_stores(harness: Harness) -> None:
    backend = await harness.open()
    bus = MessageBus(backend)
    assert (await bus.refresh_stats()).dlq == 0
    for n in range(3):
        await backend.dlq.add(outbound("a", f"dead {n}"), retry_count=1, error="gone")
    await backend.inbound.accept(inbound("a", 1))
    await backend.inbound_dlq.add(provider="telegram", chat_id="a", message_id="9",
                                  sender_id="u", stage="parse", error="bad")
    stats = await bus.refresh_stats()
    assert (stats.dlq, stats.inbound_dlq, stats.inbound_pending) == (3, 1, 1)
    assert [e.message.content for e in stats.recent_dlq] == ["dead 0", "dead 1", "dead 2"]
    assert [e.message_id for e in stats.recent_inbound_dlq] == ["9"]
    await backend.dlq.purge()
    stats = await bus.fresh_stats()
    assert stats.dlq == 0 and stats.recent_dlq == []


async def test_released_messages_are_handed_out_again_first_and_in_order(
        harness: Harness) -> None:
    backend = await harness.open()
    for n in range(4):
        await backend.inbound.accept(inbound("a", n))
    first = await backend.inbound.claim(2)
    assert [m.message_id for m in first] == ["0", "1"]
    await backend.inbound.release(first)
    again = await backend.inbound.claim(10)
    assert [m.message_id for m in again] == ["0", "1", "2", "3"]
    assert await backend.inbound.claim(10) == []
    for message in again:
        assert await backend.inbound.complete(message.key, "answered") is Completion.DONE


async def test_messages_released_out_of_order_are_handed_out_again_in_order(
        harness: Harness) -> None:
    """A turn gives back its batch with the chat's later messages behind it, gathered from
    several places (the queue, the grouping buffers): the store restores the journal's order."""
    backend = await harness.open()
    for n in range(4):
        await backend.inbound.accept(inbound("a", n))
    first = await backend.inbound.claim(3)
    assert [m.message_id for m in first] == ["0", "1", "2"]
    await backend.inbound.release([first[2], first[0], first[1]])
    again = await backend.inbound.claim(10)
    assert [m.message_id for m in again] == ["0", "1", "2", "3"]
    for message in again:
        assert await backend.inbound.complete(message.key, "answered") is Completion.DONE


async def test_a_completion_after_the_chat_moved_is_fenced_and_logged(
        redis_harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """Node A runs a message, loses the chat's partition meanwhile (here: its lease is given
    up under it and node B takes the partition): A's completion is refused and logged, and B
    is handed the message again (the duplicate window, docs/scaling.md)."""
    a = await redis_harness.open("node-a", lease_ttl_s=1.0, partitions=1)
    message = inbound("a", 1)
    assert await a.inbound.accept(message)
    [claimed] = await a.inbound.claim(10)
    lease = a.partitions.lease(0)
    assert lease is not None
    await a.leases.release(lease)  # as if it had expired while A was cut off
    b = await redis_harness.open("node-b", lease_ttl_s=1.0, partitions=1)
    assert b.owns(message.chat_key)
    replies = BusReplies(ChannelRegistry(), MessageBus(a), lambda kind, data: None)
    with caplog.at_level(logging.WARNING, logger="soulflow.conversation.replies"):
        await replies.complete([claimed.key], ReplyStatus.ANSWERED)
    assert any("moved to another node" in r.getMessage() for r in caplog.records)
    assert [m.key for m in await b.inbound.claim(10)] == [message.key]
    assert await b.inbound.complete(message.key, "answered") is Completion.DONE
