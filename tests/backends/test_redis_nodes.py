"""Several nodes on one Redis: partitions shared out, work run once and in order per chat,
a killed node's unfinished work taken over, a deposed node fenced out."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import defaultdict
from pathlib import Path

from soulflow.backends.base import Completion
from soulflow.backends.redis.backend import RedisBackend
from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.keys import GROUP, partition_of
from tests.backends.conftest import Harness
from tests.backends.helpers import eventually, inbound, outbound

ROOT = Path(__file__).resolve().parents[2]


def _redis(backend: object) -> RedisBackend:
    assert isinstance(backend, RedisBackend)
    return backend


async def test_nodes_share_the_partitions_fairly(redis_harness: Harness) -> None:
    a = _redis(await redis_harness.open("node-a", lease_ttl_s=1.0, partitions=6))
    assert a.partitions.held() == list(range(6))  # alone: everything
    b = _redis(await redis_harness.open("node-b", lease_ttl_s=1.0, partitions=6))
    c = _redis(await redis_harness.open("node-c", lease_ttl_s=1.0, partitions=6))

    async def balanced() -> bool:
        held = [set(n.partitions.held()) for n in (a, b, c)]
        return [len(h) for h in held] == [2, 2, 2] and set().union(*held) == set(range(6))

    await eventually(balanced, what="six partitions shared 2/2/2")
    await redis_harness.close(c)  # a clean stop hands its partitions over

    async def rebalanced() -> bool:
        held = [set(n.partitions.held()) for n in (a, b)]
        return [len(h) for h in held] == [3, 3] and set().union(*held) == set(range(6))

    await eventually(rebalanced, what="the stopped node's partitions taken over")


async def test_a_flood_is_run_once_and_in_order_per_chat(redis_harness: Harness) -> None:
    nodes = [_redis(await redis_harness.open(f"node-{n}", lease_ttl_s=1.0, partitions=8))
             for n in range(3)]
    chats, per_chat = 12, 10
    done: dict[str, list[int]] = defaultdict(list)
    runs: dict[str, int] = defaultdict(int)
    stop = asyncio.Event()

    async def work(node: RedisBackend) -> None:
        while not stop.is_set():
            for message in await node.inbound.claim(limit=5):
                runs[message.key] += 1
                if await node.inbound.complete(message.key, "answered") is Completion.DONE:
                    done[message.chat_id].append(int(message.message_id))
            await asyncio.sleep(0.01)

    workers = [asyncio.create_task(work(node), name=f"worker-{node.node_id}") for node in nodes]
    for n in range(per_chat):  # accepted through whichever node read it
        for chat in range(chats):
            assert await nodes[(n + chat) % 3].inbound.accept(inbound(f"chat{chat}", n))

    async def all_done() -> bool:
        return sum(len(v) for v in done.values()) == chats * per_chat

    try:
        await eventually(all_done, timeout_s=30, what="every message completed")
    finally:
        stop.set()
        await asyncio.gather(*workers)
    assert set(runs.values()) == {1}
    for chat in range(chats):
        assert done[f"chat{chat}"] == list(range(per_chat))
    assert await nodes[0].inbound.pending_count() == 0


async def test_a_killed_nodes_work_is_taken_over_in_order(redis_harness: Harness) -> None:
    args = [redis_harness.redis_url, redis_harness.prefix, "doomed", "4", "1.0", "6", "3"]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.backends.node_process", *args, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), timeout=30)
        assert line.decode().strip() == "claimed 18"
        survivor = _redis(await redis_harness.open("survivor", lease_ttl_s=1.0))
        assert survivor.partitions.held() == []  # the doomed node still holds them all
        assert await survivor.inbound.claim() == []
        process.send_signal(signal.SIGKILL)
        await asyncio.wait_for(process.wait(), timeout=10)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    taken: list[str] = []

    async def everything_taken() -> bool:
        taken.extend(m.key for m in await survivor.inbound.claim())
        return len(taken) == 18

    await eventually(everything_taken, what="the dead node's entries reclaimed")
    for chat in range(6):
        assert [k for k in taken if k.startswith(f"telegram:chat{chat}:")] == \
            [f"telegram:chat{chat}:{n}" for n in range(3)]
    replies = await survivor.outbox.pending()
    assert sorted(e.message.chat_id for e in replies) == [f"chat{n}" for n in range(6)]
    for key in taken:
        assert await survivor.inbound.complete(key, "answered") is Completion.DONE
    assert await survivor.inbound.pending_count() == 0


async def test_a_deposed_node_cannot_complete_what_it_claimed(redis_harness: Harness) -> None:
    old = _redis(await redis_harness.open("old", lease_ttl_s=30, partitions=1))
    message = inbound("c1", 1)
    await old.inbound.accept(message)
    assert [m.key for m in await old.inbound.claim()] == [message.key]
    # the old node's lease runs out (it was cut off, say) and a new node takes the partition
    await old.client.delete(old.keys.lease(old.keys.partition_lease(0)))
    new = _redis(await redis_harness.open("new", lease_ttl_s=30, partitions=1))
    assert new.partitions.held() == [0]
    assert [m.key for m in await new.inbound.claim()] == [message.key]
    assert await old.inbound.complete(message.key, "answered") is Completion.FENCED
    assert await new.inbound.complete(message.key, "answered") is Completion.DONE
    assert await new.inbound.pending_count() == 0


async def test_a_partition_with_work_in_hand_is_not_given_away(redis_harness: Harness) -> None:
    a = _redis(await redis_harness.open("node-a", lease_ttl_s=1.0, partitions=4))
    chat = next(f"c{n}" for n in range(100)
                if partition_of(f"telegram:c{n}", 4) == 3)  # the first a node gives away
    message = inbound(chat, 1)
    await a.inbound.accept(message)
    assert [m.key for m in await a.inbound.claim()] == [message.key]
    b = _redis(await redis_harness.open("node-b", lease_ttl_s=1.0, partitions=4))

    async def shared() -> bool:
        return len(a.partitions.held()) == 2 and len(b.partitions.held()) == 2

    await eventually(shared, what="the partitions shared 2/2")
    assert 3 in a.partitions.held()  # busy: kept while its message runs
    assert await a.inbound.complete(message.key, "answered") is Completion.DONE


async def test_a_partition_is_not_given_away_while_a_read_of_it_waits(
        redis_harness: Harness) -> None:
    """Seen in the three-daemon flood: a node gave a partition away while its blocking read
    of that partition's stream was waiting; Redis handed the next message to that read, the
    node could no longer hand it out, and the new holder answered it only when its sweep
    found it, after later messages of the chat. Now a surplus partition is first no longer
    read, and released only once no read of it waits."""
    slow_socket = AsyncStoreRedis.from_url(redis_harness.redis_url, socket_timeout=30)
    a = RedisBackend(slow_socket, node_id="node-a", prefix=redis_harness.prefix, partitions=4,
                     lease_ttl_s=1.0)
    await a.start()
    redis_harness.opened.append(a)
    b = _redis(await redis_harness.open("node-b", lease_ttl_s=1.0, partitions=4))
    chat = next(f"c{n}" for n in range(100)
                if partition_of(f"telegram:c{n}", 4) == 3)  # the first a node gives away
    read = asyncio.create_task(a.inbound.claim(wait_s=20))  # BLOCK, as the claim loop

    async def waiting() -> bool:
        clients = await b.client.execute_command("CLIENT", "LIST")
        text = clients.decode() if isinstance(clients, bytes) else str(clients)
        return "cmd=xreadgroup" in text

    await eventually(waiting, what="node A's read waiting on its partitions")
    await a.partitions.rebalance()  # B is live: A gives back its surplus
    first, second = inbound(chat, 1), inbound(chat, 2)
    await b.inbound.accept(first)
    await b.inbound.accept(second)
    handed = [m.key for m in await asyncio.wait_for(read, 30)]
    assert handed == [first.key]  # the read that got it hands it out
    assert 3 in a.partitions.held()  # work in hand: kept until it is done
    assert await a.inbound.complete(first.key, "answered") is Completion.DONE

    async def moved() -> bool:
        return 3 in b.partitions.held()

    await eventually(moved, what="partition 3 moving to node B once A's hands are empty")
    assert [m.key for m in await b.inbound.claim()] == [second.key]


async def test_an_entry_that_is_not_a_message_is_acknowledged_and_skipped(
        redis_harness: Harness) -> None:
    node = _redis(await redis_harness.open("node-a", partitions=1))
    await node.client.xadd(node.keys.stream(0), {"junk": "1"})
    good = inbound("c1", 1)
    await node.inbound.accept(good)
    assert [m.key for m in await node.inbound.claim()] == [good.key]
    summary = await node.client.xpending(node.keys.stream(0), GROUP)
    assert summary["pending"] == 1  # only the good one, in hand


async def test_an_entry_left_in_another_consumers_hands_is_swept_up(
        redis_harness: Harness) -> None:
    node = _redis(await redis_harness.open("node-a", lease_ttl_s=1.0, partitions=1))
    assert await node.inbound.claim() == []  # the takeover's reclaim is done
    message = inbound("c1", 1)
    await node.inbound.accept(message)
    # a deposed holder's read that reached Redis late: the entry sits in its hands
    await node.client.xreadgroup(GROUP, "late-reader", {node.keys.stream(0): ">"})
    assert await node.inbound.claim() == []
    found: list[str] = []

    async def swept() -> bool:
        found.extend(m.key for m in await node.inbound.claim())
        return bool(found)

    await eventually(swept, what="the orphaned entry to be swept up")
    assert found == [message.key]
    assert await node.inbound.complete(message.key, "answered") is Completion.DONE


async def test_streams_lost_with_redis_are_recreated(redis_harness: Harness) -> None:
    node = _redis(await redis_harness.open("node-a", partitions=2))
    await node.client.delete(node.keys.stream(0), node.keys.stream(1))  # Redis came back empty
    assert await node.inbound.claim() == []
    message = inbound("c1", 1)
    assert await node.inbound.accept(message)
    assert [m.key for m in await node.inbound.claim()] == [message.key]


async def test_a_reply_whose_partition_moved_is_not_sent_from_a_stale_list(
        redis_harness: Harness) -> None:
    node = _redis(await redis_harness.open("node-a", partitions=1))
    reply = outbound("c1", "hello")
    await node.outbox.put(reply)
    [entry] = await node.outbox.pending()
    await node.partitions.stop()  # the partition goes to another node meanwhile
    assert not await node.outbox.record_sending(entry.message.message_id)
    other = _redis(await redis_harness.open("node-b", partitions=1))
    assert [e.message.message_id for e in await other.outbox.pending()] == [reply.message_id]
    assert await other.outbox.record_sending(reply.message_id)
