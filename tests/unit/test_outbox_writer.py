"""The outbox writer stores what waits in line as one batch, in line order: replies of many
chats and the completions queued behind them share a store call, a completion is never
stored ahead of a reply queued before it, and a failing store holds the whole line."""

from __future__ import annotations

import asyncio
from pathlib import Path

from soulflow.backends.base import Completing, Completion, OutboxWrite, WriteResult
from soulflow.backends.file.backend import FileBackend
from soulflow.bus.bus import MessageBus
from soulflow.bus.writer import MAX_BATCH, OutboxWriter, StoreHealth
from soulflow.contracts import OutboundMessage
from tests.backends.helpers import inbound
from tests.waiting import until


class RecordingStore:
    """Stores everything; records each batch; fails while `down`."""

    def __init__(self) -> None:
        self.batches: list[list[OutboxWrite]] = []
        self.down = False
        self.ids: set[str] = set()

    async def store(self, writes: list[OutboxWrite]) -> list[WriteResult]:
        if self.down:
            raise ConnectionError("store unreachable")
        self.batches.append(list(writes))
        results: list[WriteResult] = []
        for write in writes:
            if isinstance(write, Completing):
                results.append([Completion.DONE] * len(write.keys))
            else:
                results.append(write.message_id not in self.ids)
                self.ids.add(write.message_id)
        return results


def reply(n: int) -> OutboundMessage:
    return OutboundMessage(provider="fake", chat_id=f"c{n % 3}", content=f"reply {n}")


async def no_sleep(delay: float) -> None:
    await asyncio.sleep(0)


def writer_for(store: RecordingStore, stored: list[str]) -> OutboxWriter:
    return OutboxWriter(store.store, lambda message: stored.append(message.content),
                        StoreHealth(), no_sleep, backoff=(0.001, 0.01))


async def test_what_waits_in_line_is_stored_as_one_batch_in_order() -> None:
    store, stored = RecordingStore(), []
    writer = writer_for(store, stored)
    first, second = reply(1), reply(2)
    futures = [writer.publish(first), writer.publish(second),
               writer.complete(Completing(("fake:c1:1", "fake:c2:2"), "answered")),
               writer.publish(first)]  # published twice: stored once
    assert await asyncio.gather(*futures) == [True, True, [Completion.DONE] * 2, False]
    assert store.batches == [[first, second, Completing(("fake:c1:1", "fake:c2:2"),
                                                        "answered"), first]]
    assert stored == ["reply 1", "reply 2"]  # handed on for sending: only what was stored
    await writer.stop(1)


async def test_a_failing_store_holds_the_line_and_keeps_its_order() -> None:
    store, stored = RecordingStore(), []
    writer = writer_for(store, stored)
    store.down = True
    first, fourth = reply(1), reply(4)
    completing = Completing(("fake:c1:1",), "answered")
    put = writer.publish(first)
    done = writer.complete(completing)
    health = writer._health
    await until(lambda: health.down)
    assert not put.done() and not done.done() and writer.unstored == 2
    later = writer.publish(fourth)
    store.down = False
    assert await done == [Completion.DONE] and await put and await later
    # one line, each write once, the completion behind its reply
    assert [w for batch in store.batches for w in batch] == [first, completing, fourth]
    await writer.stop(1)


async def test_a_flood_goes_in_bounded_batches_and_every_caller_hears_back() -> None:
    store, stored = RecordingStore(), []
    writer = writer_for(store, stored)
    futures: list[asyncio.Future[object]] = []
    for n in range(2000):
        futures.append(writer.publish(reply(n)))
        futures.append(writer.complete(Completing((f"fake:c:{n}",), "answered")))
    results = await asyncio.gather(*futures)
    assert results == [True, [Completion.DONE]] * 2000
    assert all(len(batch) <= MAX_BATCH for batch in store.batches)
    assert len(store.batches) < 100  # batched, not one call per write
    assert stored == [f"reply {n}" for n in range(2000)]
    await writer.stop(1)


async def test_after_the_stop_a_completion_is_recorded_directly(tmp_path: Path) -> None:
    bus = MessageBus(FileBackend(tmp_path / "runtime", node_id="test"))
    await bus.start()
    message = inbound("a", 1)
    assert await bus.inbound.accept(message)
    assert [m.key for m in await bus.inbound.claim()] == [message.key]
    await bus.stop(0.1)
    assert await bus.complete_inbound([message.key], "answered") == [Completion.DONE]
    assert await bus.inbound.pending_count() == 0
    await bus.backend.stop()
