"""Folding: messages that queue up while a chat's turn runs are answered in one next turn."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from soulflow.bus.bus import MessageBus
from soulflow.conversation.folding import ChatBacklog
from tests.unit.test_conversation import (  # noqa: F401 - rig is a fixture
    done_records,
    drained,
    msg,
    rig,
    settle,
)
from tests.waiting import until


async def busy_with_first(build: Any, adapter: Any, model: Any, **options: Any) -> Any:
    """A conversation whose chat is in the middle of a turn for "first" (the model is held on its
    gate), so that the next messages queue up behind it."""
    conversation = build(**options)
    model.gate = asyncio.Event()
    await conversation.ingest(adapter, [msg(1, "first")])
    await until(lambda: conversation.runs.count() > 0, timeout=20)
    return conversation


def journal_done(bus: MessageBus) -> dict[str, str]:
    """key -> status of every completed record in the inbound journal."""
    return {r["key"]: r["status"] for r in done_records(bus)}


async def backlog_reaches(conversation: Any, count: int) -> None:
    """The claim loop has handed the chat's queued messages to the conversation."""
    await until(lambda: conversation.backlog_for("chat:c1") >= count, timeout=20)


async def test_a_burst_queued_behind_a_turn_is_answered_once_in_order(rig) -> None:  # noqa: F811
    build, adapter, model, bus = rig
    conversation = await busy_with_first(build, adapter, model)
    await conversation.ingest(adapter, [msg(2, "second"), msg(3, "third")])
    await conversation.ingest(adapter, [msg(4, "fourth", sender_name="Alice")])
    await backlog_reaches(conversation, 3)
    assert conversation.backlog_for("chat:c1") == 3
    model.gate.set()
    replies = await settle(adapter, 2)
    assert replies[0] == "echo: first"
    folded = replies[1].removeprefix("echo: ").splitlines()
    assert folded == ["(3 messages arrived while I was busy; answer them together, in order.)",
                      "[1] alice: second", "[2] alice: third", "[3] Alice: fourth"]
    assert adapter.sent[1].reply_to == "m4"  # the one reply answers the last of them
    # a message after the burst is answered next: nothing else was sent or asked in between
    await conversation.ingest(adapter, [msg(5, "sentinel")])
    assert (await settle(adapter, 3))[2:] == ["echo: sentinel"]
    assert model.inputs[2:] == ["sentinel"]
    assert await drained(bus)
    assert journal_done(bus) == {f"chat:c1:m{i}": "answered" for i in range(1, 6)}


async def test_commands_and_decisions_keep_their_own_turn_and_order(rig) -> None:  # noqa: F811
    build, adapter, model, bus = rig
    conversation = await busy_with_first(build, adapter, model)
    await conversation.ingest(adapter, [msg(2, "a"), msg(3, "/help"), msg(4, "b"), msg(5, "c"),
                                   msg(6, "approve"), msg(7, "d")])
    await backlog_reaches(conversation, 6)
    model.gate.set()
    replies = await settle(adapter, 6)
    assert replies[0] == "echo: first"
    assert replies[1] == "echo: a"  # alone: the command right behind it may not be folded
    assert replies[2].startswith("Commands:")
    assert replies[3].endswith("[1] alice: b\n[2] alice: c")
    assert replies[4] == "echo: approve"  # no approval pending: an ordinary message, alone
    assert replies[5] == "echo: d"
    assert await drained(bus)


async def test_fold_cap_and_fold_max_one_turns_it_off(rig) -> None:  # noqa: F811
    build, adapter, model, bus = rig
    conversation = await busy_with_first(build, adapter, model, fold_max=1)
    await conversation.ingest(adapter, [msg(2, "second"), msg(3, "third")])
    await backlog_reaches(conversation, 2)
    model.gate.set()
    assert await settle(adapter, 3) == ["echo: first", "echo: second", "echo: third"]


def test_backlog_folds_only_what_queued_behind_a_turn_and_at_most_the_cap() -> None:
    backlog = ChatBacklog(fold_max=3)
    for i in range(6):
        backlog.push([msg(i, f"t{i}")])
    idle = backlog.take("chat:c1", lambda m: True)  # an idle chat's first turn: one batch
    assert idle is not None and not idle.folded and [m.message_id for m in idle.batch] == ["m0"]
    backlog.finished("chat:c1")  # five batches queued up while it ran
    first = backlog.take("chat:c1", lambda m: True)
    assert first is not None and first.folded
    assert [m.message_id for m in first.batch] == ["m1", "m2", "m3"]
    second = backlog.take("chat:c1", lambda m: True)
    assert second is not None and [m.message_id for m in second.batch] == ["m4", "m5"]
    assert backlog.take("chat:c1", lambda m: True) is None and backlog.pending == 0


async def test_a_crash_mid_turn_replays_every_folded_message_answered_once(
        rig, tmp_path: Path) -> None:  # noqa: F811
    build, adapter, model, bus = rig
    conversation = await busy_with_first(build, adapter, model)
    await conversation.ingest(adapter, [msg(2, "second"), msg(3, "third")])
    await backlog_reaches(conversation, 2)
    await conversation.stop(timeout=0.05)  # the "crash": the running turn is cancelled
    assert adapter.sent == []
    assert {m.message_id for m in await bus.inbound.pending()} == {"m1", "m2", "m3"}
    model.gate = None
    bus = await build.__self__.restart_bus()  # a new process over the same journal
    restarted = build(claiming=False)
    assert await restarted.resume_pending() == 3
    build.__self__.claim(restarted)
    replies = await settle(adapter, 2)
    # the interrupted run resumes with its own input; the two behind it fold into one
    assert replies == ["echo: first", "echo: (2 messages arrived while I was busy; answer "
                       "them together, in order.)\n[1] alice: second\n[2] alice: third"]
    # a message after them is answered next: nothing was answered twice in between
    await restarted.ingest(adapter, [msg(4, "sentinel")])
    assert (await settle(adapter, 3))[2:] == ["echo: sentinel"]
    assert await drained(bus)
    assert set(journal_done(bus)) == {f"chat:c1:m{i}" for i in range(1, 5)}


async def test_an_idle_chat_answers_the_first_message_alone_then_the_rest_together(
        rig) -> None:  # noqa: F811
    build, adapter, model, bus = rig
    conversation = build()
    await conversation.ingest(adapter, [msg(1, "one"), msg(2, "two"), msg(3, "three")])
    replies = await settle(adapter, 2)
    assert replies[0] == "echo: one"
    assert replies[1].endswith("[1] alice: two\n[2] alice: three")
