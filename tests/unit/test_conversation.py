"""The inbound pipeline with an in-memory adapter and model (no platform involved)."""

from __future__ import annotations

import asyncio
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from soulflow.agent.tools.base import ChatRef
from soulflow.backends.base import RunMoved
from soulflow.backends.file.backend import FileBackend
from soulflow.bus.bus import MessageBus
from soulflow.channels.base import ChannelAdapter, ChannelLimits
from soulflow.channels.registry import ChannelRegistry
from soulflow.contracts import (
    Attachment,
    InboundMessage,
    OutboundMessage,
    ProviderError,
    ProviderResult,
    ReplyStatus,
    SendResult,
    ToolCall,
)
from soulflow.conversation.access import AccessPolicy
from soulflow.conversation.attachments import ChatFiles
from soulflow.conversation.turns import Conversation
from soulflow.errors import StoreUnavailable
from tests.agent.domain_rig import agent_domain
from tests.waiting import until


class MemoryAdapter(ChannelAdapter):
    name = "chat"
    limits = ChannelLimits(max_text=600, chunk_size=580, file_fallback_threshold=2000)

    def __init__(self) -> None:
        self.sent: list[OutboundMessage] = []
        self.committed: list[str] = []
        self.reactions: list[tuple[str, str, str]] = []
        self.typing: list[bool] = []

    async def read(self) -> list[InboundMessage]:
        return []

    def commit(self, messages: list[InboundMessage]) -> None:
        self.committed.extend(m.message_id for m in messages)

    async def send(self, message: OutboundMessage) -> SendResult:
        self.sent.append(message)
        return SendResult()

    async def add_reaction(self, chat_id: str, message_id: str, emoji: str) -> None:
        self.reactions.append((chat_id, message_id, emoji))

    async def set_typing(self, chat_id: str, on: bool) -> None:
        self.typing.append(on)

    async def download(self, attachment: Attachment, folder: ChatFiles) -> PurePosixPath:
        return await folder.save(attachment.name, b"file body")


class EchoModel:
    name = "echo"

    def __init__(self) -> None:
        self.gate: asyncio.Event | None = None
        self.inputs: list[str] = []
        self.reply: str | None = None
        self.calls: list[ToolCall] = []  # tool calls to make on every turn (never finishing)

    async def chat(self, messages: list[dict[str, Any]], tools: Any = None, *,
                   on_stream: Any = None, abort: asyncio.Event | None = None) -> ProviderResult:
        self.inputs.append(messages[-1]["content"])
        if self.gate is not None:
            waiter = asyncio.ensure_future(self.gate.wait())
            aborter = asyncio.ensure_future(abort.wait()) if abort else None
            await asyncio.wait([t for t in (waiter, aborter) if t],
                               return_when=asyncio.FIRST_COMPLETED)
            if abort is not None and abort.is_set():
                raise ProviderError("aborted", "stopped")
        if self.calls:
            return ProviderResult(content="still working", tool_calls=list(self.calls))
        return ProviderResult(content=self.reply or f"echo: {messages[-1]['content']}")

    async def close(self) -> None:
        return None


class Rig:
    """A bus on the file backend and the conversations built on it, each with its claim loop
    running as the daemon's supervisor runs it ("inbound:claim"); `restart_bus()` reopens the
    backend over the same files, as a new process would."""

    def __init__(self, tmp_path: Path, registry: ChannelRegistry, agent: Any) -> None:
        self.tmp_path = tmp_path
        self.registry = registry
        self.agent = agent
        self.bus = self._new_bus()
        self.tasks: list[asyncio.Task[None]] = []

    def _new_bus(self) -> MessageBus:
        bus = MessageBus(FileBackend(self.tmp_path / "runtime", node_id="test"))
        bus.bind_senders(self.registry.get)
        return bus

    def build(self, *, claiming: bool = True, **kwargs: Any) -> Conversation:
        access = kwargs.pop("access", AccessPolicy.from_lists({"chat": ["alice"]}))
        conversation = Conversation(self.registry, self.bus, self.agent, access=access,
                                 workspace=self.tmp_path, **kwargs)
        if claiming:
            self.claim(conversation)
        return conversation

    def claim(self, conversation: Conversation) -> None:
        self.tasks.append(asyncio.create_task(conversation.claim_loop(), name="inbound:claim"))

    async def stop_claiming(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()

    async def restart_bus(self) -> MessageBus:
        await self.stop_claiming()
        await self.bus.stop(0.1)
        await self.bus.backend.stop()
        self.bus = self._new_bus()
        await self.bus.start()
        return self.bus

    async def close(self) -> None:
        await self.stop_claiming()
        await self.bus.stop(0.1)
        await self.bus.backend.stop()


@pytest.fixture
async def rig(tmp_path: Path):  # type: ignore[no-untyped-def]
    model = EchoModel()
    agent = agent_domain(tmp_path, model, ChatRef("chat", "c1"))
    adapter = MemoryAdapter()
    registry = ChannelRegistry()
    registry.register(adapter)
    rigged = Rig(tmp_path, registry, agent)
    await rigged.bus.start()
    yield rigged.build, adapter, model, rigged.bus
    await rigged.close()


async def drained(bus: MessageBus, timeout: float = 20.0) -> bool:
    """Every inbound message completed (a reply is sent concurrently with the completion
    that follows its storing, so a test waits for both)."""
    async with asyncio.timeout(timeout):
        while await bus.inbound.pending_count():
            await asyncio.sleep(0.002)
    return True


def done_records(bus: MessageBus) -> list[dict[str, Any]]:
    """The completion records of the inbound journal file (file backend)."""
    return [r for r in bus.inbound.journal._file.iter_records() if r.get("op") == "done"]


def msg(i: int, text: str = "hi", **kwargs: Any) -> InboundMessage:
    fields = {"provider": "chat", "chat_id": "c1", "message_id": f"m{i}", "sender_id": "alice",
              "text": text, "is_mention": True, **kwargs}
    return InboundMessage(**fields)


async def settle(adapter: MemoryAdapter, count: int) -> list[str]:
    """The texts sent, once there are at least `count` (a generous wait)."""
    await until(lambda: len(adapter.sent) >= count, timeout=20)
    return [m.content for m in adapter.sent]


def first_run_fails(conversation: Conversation, monkeypatch: pytest.MonkeyPatch,
                    error: Exception) -> tuple[list[str], asyncio.Event, asyncio.Event]:
    """The first run starts (`running` set), waits for `go`, then raises `error`; the others
    answer. Returns (the texts runs were given, running, go)."""
    real = conversation.agent.respond
    runs: list[str] = []
    running, go = asyncio.Event(), asyncio.Event()

    async def respond(message: InboundMessage, text: str, **kwargs: Any) -> Any:
        runs.append(text)
        if len(runs) == 1:
            running.set()
            await go.wait()
            raise error
        return await real(message, text, **kwargs)

    monkeypatch.setattr(conversation.agent, "respond", respond)
    return runs, running, go


async def test_priming_bots_and_unaddressed_messages_are_seen_not_answered(rig) -> None:
    build, adapter, model, bus = rig
    conversation = build()
    fresh = await conversation.ingest(adapter, [msg(1, priming=True), msg(2, from_bot=True),
                                     msg(3, is_mention=False), msg(4, "real")])
    assert [m.message_id for m in fresh] == ["m4"]
    assert adapter.committed == ["m1", "m2", "m3", "m4"]
    assert await settle(adapter, 1) == ["echo: real"]
    assert all([await bus.inbound.is_seen(f"chat:c1:m{i}") for i in range(1, 5)])
    assert await conversation.ingest(adapter, [msg(1), msg(4)]) == []  # never answered later


async def test_unknown_user_gets_one_polite_refusal_per_cooldown(rig) -> None:
    build, adapter, model, bus = rig
    conversation = build()
    await conversation.ingest(adapter, [msg(1, sender_id="mallory"), msg(2, sender_id="mallory")])
    replies = await settle(adapter, 1)
    assert len(replies) == 1 and "mallory" in replies[0] and "CHAT_ALLOWED_USERS" in replies[0]
    assert model.inputs == []
    await conversation.ingest(adapter, [msg(3, sender_id="mallory")])
    # the chat's replies go out in order: one to alice after mallory's third message shows
    # that message was handled, and answered with nothing (the refusal is cooling down)
    await conversation.ingest(adapter, [msg(4, "sentinel")])
    assert await settle(adapter, 2) == [replies[0], "echo: sentinel"]


async def test_a_run_stopped_by_max_turns_is_counted_apart_from_answers(rig) -> None:
    """The best-effort reply is posted, but the turn counts (and is journaled) as max_turns."""
    build, adapter, model, bus = rig
    model.calls = [ToolCall("c1", "no_such_tool", {})]
    conversation = build()
    await conversation.ingest(adapter, [msg(1, "loop forever")])
    await settle(adapter, 1)
    async with asyncio.timeout(5):
        while not conversation.max_turns_count:
            await asyncio.sleep(0.001)
    assert (conversation.answered_count, conversation.failed_count) == (0, 0)
    done = done_records(bus)
    assert [r["status"] for r in done] == [ReplyStatus.MAX_TURNS] == ["max_turns"]


async def test_star_allows_everyone(rig) -> None:
    build, adapter, model, bus = rig
    conversation = build(access=AccessPolicy.from_lists({"chat": ["*"]}))
    await conversation.ingest(adapter, [msg(1, "yo", sender_id="anyone")])
    assert await settle(adapter, 1) == ["echo: yo"]


async def test_commands(rig) -> None:
    build, adapter, model, bus = rig
    conversation = build()
    await conversation.ingest(adapter, [msg(1, "/help"), msg(2, "/repl 1+1"), msg(3, "/frobnicate"),
                             msg(4, "/stop")])
    replies = await settle(adapter, 4)
    assert replies[0] == "Nothing is running in this chat."  # /stop jumps the chat's queue
    assert replies[1].startswith("Commands:") and "/stop" in replies[1]
    assert "/repl is not available" in replies[2]
    assert replies[3].startswith("I don't know the command /frobnicate") and "Commands:" in \
        replies[3]
    assert model.inputs == []


async def test_stop_command_and_stop_reaction_abort_a_running_answer(rig) -> None:
    build, adapter, model, bus = rig
    conversation = build()
    model.gate = asyncio.Event()
    await conversation.ingest(adapter, [msg(1, "long job")])
    async with asyncio.timeout(5):
        while conversation.runs.count() == 0:
            await asyncio.sleep(0.001)
    await conversation.ingest(adapter, [msg(2, "", kind="reaction", reaction="🛑",
                                       target_message_id="m1")])
    assert await settle(adapter, 1) == ["Stopped."]
    async with asyncio.timeout(5):  # typing is switched off as the turn unwinds
        while not (adapter.typing and adapter.typing[-1] is False):
            await asyncio.sleep(0.001)
    assert ("c1", "m1", "👀") not in adapter.reactions  # no read-ack emoji for this platform


async def test_grouping_answers_a_burst_once(rig) -> None:
    build, adapter, model, bus = rig
    conversation = build(grouping_window_s=0.05, grouping_max=10)
    await conversation.ingest(adapter, [msg(1, "first"), msg(2, "second"), msg(3, "third")])
    assert await settle(adapter, 1) == ["echo: first\nsecond\nthird"]
    await conversation.ingest(adapter, [msg(4, "sentinel")])  # answered next: nothing in between
    assert await settle(adapter, 2) == ["echo: first\nsecond\nthird", "echo: sentinel"]
    assert await drained(bus)


async def test_long_replies_are_split_in_order_and_huge_ones_sent_as_file(rig) -> None:
    build, adapter, model, bus = rig
    conversation = build()
    model.reply = " ".join(f"w{i:03d}" for i in range(300))
    await conversation.ingest(adapter, [msg(1)])
    parts = await settle(adapter, 3)
    assert [p[:5] for p in parts] == ["[1/3]", "[2/3]", "[3/3]"]
    assert all(len(p) <= 600 for p in parts)
    assert " ".join(p.split(" ", 1)[1] for p in parts).split() == model.reply.split()
    adapter.sent.clear()
    model.reply = "x" * 2500
    await conversation.ingest(adapter, [msg(2)])
    await settle(adapter, 1)
    assert adapter.sent[0].options.as_file and adapter.sent[0].content == "x" * 2500


async def test_attachments_enter_as_local_paths(rig, tmp_path: Path) -> None:
    build, adapter, model, bus = rig
    conversation = build()
    await conversation.ingest(adapter, [msg(1, "see file", thread_id="t9", attachments=[
        Attachment(name="a.txt", url="http://x/a")])])
    await settle(adapter, 1)
    # in the chat's own zone, named by its workspace-relative path (the chat, not a thread)
    assert "[attachment a.txt saved at chats/chat-c1/files/a.txt]" in model.inputs[0]
    assert (tmp_path / "chats" / "chat-c1" / "files" / "a.txt").read_bytes() == b"file body"
    assert not (tmp_path / "runtime" / "inbound-files").exists()


async def test_a_turn_cut_short_by_a_lost_store_is_run_again_not_quarantined(
        rig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The store fails mid-turn while the backend reports it unreachable: nothing can be
    recorded, so the batch is given back and answered once the store answers again. An
    expected outage is logged in a line, not as a failure with a traceback."""
    build, adapter, model, bus = rig
    conversation = build()
    conversation.release_pause_s = 0.01
    real = bus.outbox.has_answered
    calls: list[str] = []

    async def has_answered(key: str) -> bool:
        calls.append(key)
        if len(calls) == 1:
            monkeypatch.setattr(bus.backend, "status", lambda: {"connected": False})
            raise ConnectionError("store unreachable")
        monkeypatch.undo()
        return await real(key)

    monkeypatch.setattr(bus.outbox, "has_answered", has_answered)
    await conversation.ingest(adapter, [msg(1, "still there?")])
    assert await settle(adapter, 1) == ["echo: still there?"]
    assert calls == ["chat:c1:m1", "chat:c1:m1"] and await bus.inbound_dlq.count() == 0
    assert await drained(bus)
    assert not [r for r in caplog.records if r.exc_info], caplog.text
    assert "handling chat:c1:m1 stopped: the store did not answer" in caplog.text


async def test_a_turn_failed_by_the_store_not_answering_is_run_again(
        rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A synchronous store (sessions, runs on Redis) fails on the network while the backend's
    own probe still says connected: the store says so (`StoreUnavailable`), so the batch is
    given back, not quarantined with an apology."""
    build, adapter, model, bus = rig
    conversation = build()
    conversation.release_pause_s = 0.01
    real = bus.outbox.has_answered
    calls: list[str] = []

    async def has_answered(key: str) -> bool:
        calls.append(key)
        if len(calls) == 1:
            raise StoreUnavailable("Error 111 connecting to localhost:6379")
        return await real(key)

    monkeypatch.setattr(bus.outbox, "has_answered", has_answered)
    await conversation.ingest(adapter, [msg(1, "still there?")])
    assert await settle(adapter, 1) == ["echo: still there?"]
    assert len(calls) == 2 and await bus.inbound_dlq.count() == 0
    assert await drained(bus)


async def test_a_run_failed_by_the_store_not_answering_is_not_apologised_for(
        rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run itself hits the store away (a run-journal write on Redis): no "Sorry, something
    went wrong" reply; the batch is given back and answered once the store answers."""
    build, adapter, model, bus = rig

    conversation = build()
    conversation.release_pause_s = 0.01
    real = conversation.agent.respond
    runs: list[str] = []

    async def respond(message: InboundMessage, text: str, **kwargs: Any) -> Any:
        runs.append(message.key)
        if len(runs) == 1:
            raise StoreUnavailable("Timeout reading from socket")
        return await real(message, text, **kwargs)

    monkeypatch.setattr(conversation.agent, "respond", respond)
    await conversation.ingest(adapter, [msg(1, "hello")])
    assert await settle(adapter, 1) == ["echo: hello"]
    assert runs == ["chat:c1:m1", "chat:c1:m1"] and await bus.inbound_dlq.count() == 0
    assert await drained(bus)


@pytest.mark.parametrize("failure", [
    StoreUnavailable("Timeout reading from socket"),
    RunMoved("the chat's partition is held under a newer lease")], ids=["store-away", "moved"])
async def test_a_given_back_message_is_answered_before_its_chats_later_ones(
        rig, monkeypatch: pytest.MonkeyPatch, failure: Exception) -> None:
    """m1's turn is given back while m2 and m3 wait behind it here, and the chat is still
    answered m1, m2, m3. The store went away (the batch waits here, first in line), or m1's
    run was moved (its chat's partition lost and taken back under a newer lease): m1 goes back
    to the store, and everything the chat had queued here with it, or m1 would be handed out
    again behind them (the CI failure 'c3 m0, m2, m1' of the Redis restart test)."""
    build, adapter, model, bus = rig
    conversation = build(fold_max=1)
    conversation.release_pause_s = 0.05
    runs, m1_running, queued = first_run_fails(conversation, monkeypatch, failure)
    await conversation.ingest(adapter, [msg(1, "m1")])
    async with asyncio.timeout(20):
        await m1_running.wait()
    await conversation.ingest(adapter, [msg(2, "m2"), msg(3, "m3")])
    await until(lambda: conversation.backlog_for("chat:c1") >= 2, timeout=20)
    queued.set()
    assert await settle(adapter, 3) == ["echo: m1", "echo: m2", "echo: m3"]
    assert runs == ["m1", "m1", "m2", "m3"]
    assert await drained(bus)


async def test_a_fold_rule_that_meets_the_store_away_does_not_wedge_the_chat(
        rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deciding whether queued messages may fold reads the run store; if that fails (Redis
    away), the turn runs unfolded instead of the chat keeping its backlog with no job."""
    build, adapter, model, bus = rig
    conversation = build()
    failures: list[str] = []
    real = conversation.agent.open_run

    def open_run(chat_key: str, **kwargs: Any) -> Any:
        if not failures:  # the fold rule's read fails; the turn's own read finds the store
            failures.append(chat_key)
            raise ConnectionError("run store unreachable")
        return real(chat_key, **kwargs)

    monkeypatch.setattr(conversation.agent, "open_run", open_run)
    await conversation.ingest(adapter, [msg(1, "hello")])
    assert await settle(adapter, 1) == ["echo: hello"]
    assert failures and conversation.queued == 0
    assert await drained(bus)


async def test_a_message_whose_run_moved_is_handed_out_again_to_the_chats_holder(
        rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """RunMoved: the chat's partition passed to a newer lease while the turn ran (Redis away
    long enough). The conversation lets go of the message in the store too, so the chat's next
    holder (this node again, after taking the partition back) is handed it: never stranded."""
    build, adapter, model, bus = rig
    conversation = build()
    real = conversation.agent.respond
    runs: list[str] = []

    async def respond(message: InboundMessage, text: str, **kwargs: Any) -> Any:
        runs.append(text)
        if len(runs) == 1:
            raise RunMoved("the chat's partition is held under a newer lease")
        return await real(message, text, **kwargs)

    monkeypatch.setattr(conversation.agent, "respond", respond)
    await conversation.ingest(adapter, [msg(1, "hello")])
    assert await settle(adapter, 1) == ["echo: hello"]
    assert runs == ["hello", "hello"] and await bus.inbound_dlq.count() == 0
    assert await drained(bus)


async def test_a_moved_run_takes_the_chats_grouping_buffer_back_too(
        rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """m2 is still in the grouping window when m1's run is moved: handed out again, m1 goes
    before m2 (here they fold into one input, in the order they were sent)."""
    build, adapter, model, bus = rig
    conversation = build(grouping_window_s=0.2, grouping_max=10)
    _, m1_running, buffered = first_run_fails(
        conversation, monkeypatch, RunMoved("the chat's partition is held under a newer lease"))
    await conversation.ingest(adapter, [msg(1, "m1")])
    async with asyncio.timeout(20):
        await m1_running.wait()
    await conversation.ingest(adapter, [msg(2, "m2")])
    await until(lambda: conversation.queued >= 1, timeout=20)  # m2 waits in its window
    buffered.set()
    assert await settle(adapter, 1) == ["echo: m1\nm2"]
    assert await drained(bus)


async def test_a_batch_whose_chat_moved_while_it_waited_is_left_to_the_new_holder(
        rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis: a chat's partition passes to another node while its messages wait here; they are
    not run here (the new holder takes them over from the stream, in order) but let go of."""
    build, adapter, model, bus = rig
    conversation = build()
    released: list[str] = []

    async def release(messages: list[InboundMessage]) -> None:
        released.extend(m.key for m in messages)  # (Redis: the partition's new holder's now)

    monkeypatch.setattr(bus.backend, "owns", lambda chat_key: False)
    monkeypatch.setattr(bus.inbound, "release", release)
    await conversation.ingest(adapter, [msg(1, "hello")])
    await until(lambda: released == ["chat:c1:m1"])
    assert adapter.sent == [] and model.inputs == []


async def test_a_failure_that_cannot_be_recorded_gives_the_batch_back(
        rig, monkeypatch: pytest.MonkeyPatch) -> None:
    build, adapter, model, bus = rig
    runs: list[str] = []

    async def explode(command: Any, message: InboundMessage) -> str:
        runs.append(message.key)
        if len(runs) == 1:
            raise RuntimeError("renderer crashed")
        return "rendered"

    async def broken_record(*args: Any, **kwargs: Any) -> str:
        monkeypatch.undo()  # the quarantine works again afterwards
        raise OSError("disk full")

    conversation = build(commands={"render": explode})
    conversation.release_pause_s = 0.01
    monkeypatch.setattr(conversation.quarantine, "record", broken_record)
    await conversation.ingest(adapter, [msg(1, "/render graph")])
    assert await settle(adapter, 1) == ["rendered"]  # run again, answered once
    assert runs == ["chat:c1:m1", "chat:c1:m1"]
