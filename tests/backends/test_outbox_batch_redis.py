"""On Redis the outbox writer's batch is one round trip, and runs whole even when Redis has
lost its scripts (a restart): a completion is never recorded while the reply queued ahead
of it failed to run."""

from __future__ import annotations

import pytest

from soulflow.backends.base import Completing, Completion
from tests.backends.conftest import Harness
from tests.backends.helpers import counting_round_trips, inbound, outbound


async def claimed(backend, *messages):  # type: ignore[no-untyped-def]
    for message in messages:
        assert await backend.inbound.accept(message)
    assert len(await backend.inbound.claim()) == len(messages)


async def test_replies_and_completions_of_several_chats_cost_one_round_trip(
        redis_harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = await redis_harness.open()
    asked = [inbound(chat, n) for n, chat in enumerate("abc")]
    await claimed(backend, *asked)
    sends = counting_round_trips(monkeypatch)
    writes = []
    for message in asked:
        writes += [outbound(message.chat_id, "answer", inbound_key=message.key),
                   Completing((message.key,), "answered")]
    assert await backend.outbox.store(writes) == [True, [Completion.DONE]] * 3
    assert len(sends) == 1
    assert await backend.inbound.pending_count() == 0


async def test_a_batch_runs_whole_after_redis_lost_its_scripts(
        redis_harness: Harness) -> None:
    backend = await redis_harness.open()
    asked = inbound("a", 1)
    await claimed(backend, asked)
    await backend.client.script_flush()  # as after a restart without persistence
    results = await backend.outbox.store([
        outbound("a", "answer", inbound_key=asked.key), Completing((asked.key,), "answered")])
    assert results == [True, [Completion.DONE]]
    assert await backend.outbox.has_answered(asked.key)
    assert [e.message.content for e in await backend.outbox.pending()] == ["answer"]
