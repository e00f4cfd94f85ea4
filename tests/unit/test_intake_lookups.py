"""Intake asks the journal whether it saw a message only where a repeat would act twice: a
message to answer costs one store call (`accept`, which refuses a seen id itself), and a
store that does not answer leaves the message to be read again, never quarantined."""

from __future__ import annotations

from collections import Counter
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
    await bus.inbound.mark_seen([command.key])
    assert await screen.take_in(command) is Verdict.SKIP
    assert calls == Counter(is_seen=3)
    ignored = msg(3, is_mention=False)  # marking it seen again changes nothing: no look-up
    assert await screen.take_in(ignored) is Verdict.SEEN
    assert calls == Counter(is_seen=3)


async def test_a_store_away_at_intake_leaves_the_message_to_be_read_again(
        rig, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    build, adapter, model, bus = rig
    conversation = build()
    real_accept = bus.inbound.accept
    away = True

    async def accept(message: InboundMessage) -> bool:
        if away:
            raise StoreUnavailable("Connection refused")
        return await real_accept(message)

    monkeypatch.setattr(bus.inbound, "accept", accept)
    with pytest.raises(StoreUnavailable):
        await conversation.ingest(adapter, [msg(1, "kept")])
    assert adapter.committed == []  # the cursor stays: the channel reads it again
    assert await bus.inbound_dlq.entries() == []  # not the message's fault: no quarantine
    away = False
    assert len(await conversation.ingest(adapter, [msg(1, "kept")])) == 1
    assert await settle(adapter, 1) == ["echo: kept"]
    assert await drained(bus)
