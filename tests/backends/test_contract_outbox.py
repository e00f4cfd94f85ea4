"""The outbox's contract, run against every backend (file and Redis)."""

from __future__ import annotations

from soulflow.backends.base import Completing, Completion
from tests.backends.conftest import Harness
from tests.backends.helpers import inbound, outbound


async def test_put_is_idempotent_and_pending_keeps_each_chats_order(harness: Harness) -> None:
    backend = await harness.open()
    replies = [outbound(chat, f"{chat}{n}") for n in range(4) for chat in ("a", "b")]
    for reply in replies:
        assert await backend.outbox.put(reply)
    assert not await backend.outbox.put(replies[0])
    assert await backend.outbox.count() == 8
    pending = await backend.outbox.pending()
    assert sorted(e.message.message_id for e in pending) == sorted(r.message_id for r in replies)
    for chat in ("a", "b"):
        assert [e.message.content for e in pending if e.message.chat_id == chat] == \
            [f"{chat}{n}" for n in range(4)]


async def test_has_answered_remembers_replies_after_they_are_sent(harness: Harness) -> None:
    backend = await harness.open()
    reply = outbound("a", "hi", inbound_key="telegram:a:1")
    assert not await backend.outbox.has_answered("telegram:a:1")
    await backend.outbox.put(reply)
    await backend.outbox.mark_sent(reply.message_id, ["p1"])
    assert await backend.outbox.has_answered("telegram:a:1")
    assert await backend.outbox.get(reply.message_id) is None
    backend = await harness.reopen(backend)
    assert await backend.outbox.has_answered("telegram:a:1")
    assert await backend.outbox.count() == 0


async def test_attempts_and_sending_marks_are_kept(harness: Harness) -> None:
    backend = await harness.open()
    reply = outbound("a", "retry me")
    await backend.outbox.put(reply)
    await backend.outbox.record_attempt(reply.message_id, 2, 1795000000.25, "429 slow down")
    entry = await backend.outbox.get(reply.message_id)
    assert entry is not None
    assert (entry.attempts, entry.next_at, entry.last_error, entry.in_flight) == \
        (2, 1795000000.25, "429 slow down", False)
    assert await backend.outbox.record_sending(reply.message_id)
    assert not await backend.outbox.record_sending("out_unknown")
    backend = await harness.reopen(backend)
    entry = await backend.outbox.get(reply.message_id)
    assert entry is not None and entry.in_flight and entry.attempts == 2
    assert entry.message.to_dict() == reply.to_dict()
    [pending] = await backend.outbox.pending()
    assert pending.message.message_id == reply.message_id


async def test_sent_and_dead_entries_leave_the_outbox(harness: Harness) -> None:
    backend = await harness.open()
    sent, dead, kept = outbound("a", "1"), outbound("a", "2"), outbound("b", "3")
    for reply in (sent, dead, kept):
        await backend.outbox.put(reply)
    await backend.outbox.mark_sent(sent.message_id)
    await backend.outbox.mark_dead(dead.message_id)
    await backend.outbox.mark_dead("out_unknown")
    await backend.outbox.record_attempt(sent.message_id, 1, 0.0, "late report")
    assert [e.message.message_id for e in await backend.outbox.pending()] == [kept.message_id]
    assert await backend.outbox.get(sent.message_id) is None
    backend = await harness.reopen(backend)
    assert [e.message.message_id for e in await backend.outbox.pending()] == [kept.message_id]


async def test_store_puts_replies_and_completes_their_messages_in_one_step(
        harness: Harness) -> None:
    backend = await harness.open()
    asked = [inbound("a", 1), inbound("b", 2)]
    for message in asked:
        assert await backend.inbound.accept(message)
    assert len(await backend.inbound.claim()) == 2
    first = outbound("a", "one", inbound_key=asked[0].key)
    second = outbound("b", "two", inbound_key=asked[1].key)
    results = await backend.outbox.store([
        first, Completing((asked[0].key,), "answered"),
        second, first,  # the same reply again: already pending
        Completing((asked[1].key, "telegram:nobody:9"), "answered")])
    assert results == [True, [Completion.DONE], True, False,
                       [Completion.DONE, Completion.UNKNOWN]]
    assert await backend.inbound.pending_count() == 0
    assert await backend.outbox.has_answered(asked[0].key)
    assert [e.message.content for e in await backend.outbox.pending()] in (
        ["one", "two"], ["two", "one"])  # pending() lists by partition
    assert await backend.outbox.store([]) == []
