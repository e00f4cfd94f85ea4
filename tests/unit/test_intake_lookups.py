"""Intake asks the journal whether it saw a message only where a repeat would act twice: a
message to answer costs one store call (`accept`, which refuses a seen id itself), and a
store that does not answer leaves the message to be read again, never quarantined."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from soulflow.contracts import InboundMessage
from soulflow.conversation.intake import Verdict
from soulflow.errors import StoreUnavailable
from tests.unit.test_conversation import drained, msg, rig, settle  # noqa: F401 - rig: a fixture


def count_lookups(bus: Any, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    calls: Counter[str] = Counter()
    for name in ("is_seen", "accept"):
        real = getattr(bus.inbound, name)

        async def counted(arg: Any, _real: Any = real, _name: str = name) -> Any:
            calls[_name] += 1
            return await _real(arg)

        monkeypatch.setattr(bus.inbound, name, counted)
    return calls


def accept_failing(bus: Any, monkeypatch: pytest.MonkeyPatch,
                   failure: Callable[[InboundMessage], Exception | None]) -> None:
    """The journal's `accept` raises `failure(message)` where that is not None."""
    real = bus.inbound.accept

    async def accept(message: InboundMessage) -> bool:
        error = failure(message)
        if error is not None:
            raise error
        return await real(message)

    monkeypatch.setattr(bus.inbound, "accept", accept)


async def test_a_message_to_answer_costs_one_store_call_and_is_answered_once(
        rig, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    build, adapter, model, bus = rig
    conversation = build()
    calls = count_lookups(bus, monkeypatch)
    assert len(await conversation.ingest(adapter, [msg(1, "once")])) == 1
    assert calls == Counter(accept=1)
    assert await settle(adapter, 1) == ["echo: once"]
    # the platform delivers it again: `accept` knows the id, nothing is answered twice
    assert await conversation.ingest(adapter, [msg(1, "once")]) == []
    await conversation.ingest(adapter, [msg(2, "sentinel")])
    assert await settle(adapter, 2) == ["echo: once", "echo: sentinel"]
    assert calls["is_seen"] == 0


async def test_a_refusal_a_reaction_and_a_secret_command_look_the_id_up_first(
        rig, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    build, adapter, model, bus = rig
    conversation = build()
    screen = conversation._screen
    refused = msg(1, sender_id="mallory")
    assert await screen.take_in(refused) is Verdict.SEEN
    await bus.inbound.mark_seen([refused.key])
    calls = count_lookups(bus, monkeypatch)
    assert await screen.take_in(msg(1, sender_id="mallory")) is Verdict.SKIP
    reaction = msg(2, "👍", kind="reaction")
    await bus.inbound.mark_seen([reaction.key])
    assert await screen.take_in(reaction) is Verdict.SKIP
    assert calls == Counter(is_seen=2)
    command = msg(4, "/secret set API_TOKEN abc123")  # may have been changed since: checked
    assert await screen.take_in(command) is Verdict.FRESH  # first time: journaled
    assert await screen.take_in(msg(4, "/secret set API_TOKEN abc123")) is Verdict.SKIP
    assert calls == Counter(is_seen=4, accept=1)
    ignored = msg(3, is_mention=False)  # marking it seen again changes nothing: no look-up
    assert await screen.take_in(ignored) is Verdict.SEEN
    assert calls == Counter(is_seen=4, accept=1)


async def test_a_store_away_at_intake_leaves_the_message_to_be_read_again(
        rig, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    build, adapter, model, bus = rig
    conversation = build()
    away = True
    accept_failing(bus, monkeypatch,
                   lambda message: StoreUnavailable("Connection refused") if away else None)
    with pytest.raises(StoreUnavailable):
        await conversation.ingest(adapter, [msg(1, "kept")])
    assert adapter.committed == []  # the cursor stays: the channel reads it again
    assert await bus.inbound_dlq.entries() == []  # not the message's fault: no quarantine
    away = False
    assert len(await conversation.ingest(adapter, [msg(1, "kept")])) == 1
    assert await settle(adapter, 1) == ["echo: kept"]
    assert await drained(bus)


async def test_a_batchs_chats_are_taken_in_side_by_side_each_in_its_order(
        rig, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    build, adapter, model, bus = rig
    conversation = build()
    real_accept = bus.inbound.accept
    order: list[str] = []
    first_of_c1 = asyncio.Event()

    async def accept(message: InboundMessage) -> bool:
        if message.message_id == "m1":
            await first_of_c1.wait()  # a slow store for c1's first message
        order.append(message.message_id)
        if message.message_id == "m4":  # c2 went on meanwhile: now let c1 go
            first_of_c1.set()
        return await real_accept(message)

    monkeypatch.setattr(bus.inbound, "accept", accept)
    batch = [msg(1, "a"), msg(2, "b", chat_id="c2"), msg(3, "c"), msg(4, "d", chat_id="c2")]
    fresh = await conversation.ingest(adapter, batch)
    assert [m.message_id for m in fresh] == ["m1", "m2", "m3", "m4"]  # in the batch's order
    assert order == ["m2", "m4", "m1", "m3"]  # c2 did not wait for c1; c1 kept its order


async def test_the_store_away_for_one_chat_is_raised_after_the_others_are_journaled(
        rig, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    build, adapter, model, bus = rig
    conversation = build()
    accept_failing(bus, monkeypatch, lambda message: StoreUnavailable(
        "Connection refused") if message.chat_id == "c1" else None)
    with pytest.raises(StoreUnavailable):
        await conversation.ingest(adapter, [msg(1, "lost?"), msg(2, "kept", chat_id="c2")])
    assert adapter.committed == []  # read again: c2's message is then seen, c1's journaled
    assert await bus.inbound.is_seen("chat:c2:m2") and not await bus.inbound.is_seen("chat:c1:m1")
