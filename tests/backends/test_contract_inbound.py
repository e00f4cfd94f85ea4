"""The inbound journal's contract, run against every backend (file and Redis)."""

from __future__ import annotations

import asyncio

from soulflow.backends.base import Completion
from tests.backends.conftest import Harness
from tests.backends.helpers import inbound


async def test_accept_dedupes_and_marks_seen(harness: Harness) -> None:
    backend = await harness.open()
    message = inbound("c1", 1)
    assert not await backend.inbound.is_seen(message.key)
    assert await backend.inbound.accept(message)
    assert await backend.inbound.is_seen(message.key)
    assert not await backend.inbound.accept(inbound("c1", 1, text="again"))
    assert [m.text for m in await backend.inbound.pending()] == ["c1 #1"]
    assert await backend.inbound.pending_count() == 1


async def test_mark_seen_ids_are_never_accepted(harness: Harness) -> None:
    backend = await harness.open()
    primed = [inbound("c1", n) for n in range(3)]
    await backend.inbound.mark_seen([m.key for m in primed])
    await backend.inbound.mark_seen([])
    for message in primed:
        assert await backend.inbound.is_seen(message.key)
        assert not await backend.inbound.accept(message)
    assert await backend.inbound.pending_count() == 0


async def test_claim_hands_each_message_out_once_in_chat_order(harness: Harness) -> None:
    backend = await harness.open()
    messages = [inbound(chat, n) for n in range(5) for chat in ("a", "b", "c")]
    for message in messages:
        assert await backend.inbound.accept(message)
    first = await backend.inbound.claim(limit=4)
    rest = await backend.inbound.claim(limit=100)
    assert len(first) == 4
    claimed = first + rest
    assert sorted(m.key for m in claimed) == sorted(m.key for m in messages)
    assert await backend.inbound.claim() == []
    for chat in ("a", "b", "c"):
        assert [m.message_id for m in claimed if m.chat_id == chat] == [str(n) for n in range(5)]


async def test_complete_finishes_a_message_once(harness: Harness) -> None:
    backend = await harness.open()
    a, b = inbound("c1", 1), inbound("c1", 2)
    await backend.inbound.accept(a)
    await backend.inbound.accept(b)
    assert len(await backend.inbound.claim()) == 2
    assert await backend.inbound.complete(a.key, "answered") is Completion.DONE
    assert await backend.inbound.complete(a.key, "answered") is Completion.UNKNOWN
    assert await backend.inbound.complete("telegram:c9:404", "failed", "x") is Completion.UNKNOWN
    assert [m.key for m in await backend.inbound.pending()] == [b.key]
    assert await backend.inbound.is_seen(a.key)  # completed ids stay seen
    assert not await backend.inbound.accept(a)


async def test_a_message_refused_before_any_claim_can_be_completed(harness: Harness) -> None:
    backend = await harness.open()
    message = inbound("c1", 1)
    await backend.inbound.accept(message)
    assert await backend.inbound.complete(message.key, "ignored", "unknown user") \
        is Completion.DONE
    assert await backend.inbound.claim() == []
    assert await backend.inbound.pending_count() == 0


async def test_unfinished_work_survives_a_restart_and_is_handed_out_again(
        harness: Harness) -> None:
    backend = await harness.open()
    done, running, waiting = inbound("c1", 1), inbound("c1", 2), inbound("c2", 3)
    for message in (done, running, waiting):
        await backend.inbound.accept(message)
    await backend.inbound.claim(limit=2)  # done and running: both handed out
    await backend.inbound.complete(done.key, "answered")
    backend = await harness.reopen(backend)
    assert [m.key for m in await backend.inbound.pending()] == [running.key, waiting.key]
    assert await backend.inbound.is_seen(done.key)
    again = await backend.inbound.claim()
    assert [m.key for m in again] == [running.key, waiting.key]
    assert again[0].text == running.text


async def test_messages_round_trip_whole(harness: Harness) -> None:
    backend = await harness.open()
    message = inbound("c1", 1, text="héllo ✓ \n line")
    message.platform_data = {"update_id": 17, "nested": {"a": [1, 2]}}
    message.thread_context = ("alice: earlier", "bob: ✓")
    message.thread_id = "t-9"
    message.received_at = 1795000000.123456
    await backend.inbound.accept(message)
    [claimed] = await backend.inbound.claim()
    assert claimed.to_dict() == message.to_dict()


async def test_claim_can_wait_for_the_next_message(harness: Harness) -> None:
    backend = await harness.open()
    assert await backend.inbound.claim() == []  # a takeover's reclaim, if any, is done
    message = inbound("c1", 1)
    waiting = asyncio.create_task(backend.inbound.claim(wait_s=2.0), name="waiting-claim")
    await asyncio.sleep(0)  # let the claim start waiting
    assert not waiting.done()
    assert await backend.inbound.accept(message)
    assert [m.key for m in await asyncio.wait_for(waiting, timeout=10)] == [message.key]
    assert await backend.inbound.claim(wait_s=0.05) == []  # nothing more: returns empty
