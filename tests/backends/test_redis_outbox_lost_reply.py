"""A reply stored whose answer is lost: Redis ran the storing script, then died (or the
connection broke) before its answer arrived, so the outbox writer tries the same message again.
That try finds the entry stored and must still count as stored: the writer hands on only what
it stored, and nothing else would ever queue the reply while this node keeps its partitions
(seen after a Redis restart mid-flood: a reply never sent, its message completed)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from soulflow.backends.redis import outbox as outbox_module
from soulflow.backends.redis.backend import RedisBackend
from soulflow.backends.redis.outbox import RedisOutbox
from soulflow.backends.redis.script_calls import run_in_order
from soulflow.bus.dispatcher import OutboundDispatcher
from soulflow.contracts import OutboundMessage, SendResult
from soulflow.errors import StoreUnavailable
from tests.backends.conftest import Harness
from tests.backends.helpers import outbound


class Sender:
    send_interval_s = 0.0

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send(self, message: OutboundMessage) -> SendResult:
        self.sent.append(message.content)
        return SendResult(platform_message_ids=[str(len(self.sent))])


async def no_wait(delay: float) -> None:
    await asyncio.sleep(0)


async def outbox_losing_one_answer(harness: Harness, monkeypatch: pytest.MonkeyPatch
                                   ) -> tuple[RedisBackend, RedisOutbox]:
    """A Redis outbox whose next put is stored by Redis but whose answer never arrives."""
    backend = await harness.open(partitions=1)
    assert isinstance(backend, RedisBackend)
    outbox = backend.outbox

    async def answer_lost(*args: Any, **kwargs: Any) -> Any:
        await run_in_order(*args, **kwargs)  # Redis runs it: the reply is stored
        monkeypatch.undo()
        raise StoreUnavailable("Connection closed by server.")  # as the client maps it

    monkeypatch.setattr(outbox_module, "run_in_order", answer_lost)
    return backend, outbox


async def test_a_reply_whose_storing_answer_was_lost_is_sent(
        redis_harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, outbox = await outbox_losing_one_answer(redis_harness, monkeypatch)
    sender = Sender()
    dispatcher = OutboundDispatcher(outbox, backend.dlq, lambda provider: sender,
                                    sleep=no_wait)
    await dispatcher.start()
    reply = outbound("c1", "echo: m1", inbound_key="telegram:c1:1")
    try:
        stored = await dispatcher.publish(reply)
        await asyncio.gather(*dispatcher._workers.values())
        assert sender.sent == ["echo: m1"]
        assert stored  # by the try whose answer was lost
        assert await outbox.count() == 0
    finally:
        await dispatcher.stop(1.0)


async def test_a_second_put_of_a_stored_reply_still_answers_already_pending(
        redis_harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, outbox = await outbox_losing_one_answer(redis_harness, monkeypatch)
    reply = outbound("c1", "echo: m1")
    with pytest.raises(StoreUnavailable):
        await outbox.put(reply)
    assert await outbox.put(reply)  # the lost answer's try stored it: this one says so
    assert not await outbox.put(reply)  # a put of a pending entry after that: not stored
    assert [e.message.content for e in await outbox.pending()] == ["echo: m1"]
