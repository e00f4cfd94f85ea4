"""Approvals are bound to people, through the real inbound pipeline.

Conversation → AgentDomain → AgentLoop with its thread journal, the real bus and dispatcher
(sends recorded by an in-memory adapter that reports platform ids, so the approval message
is remembered for reactions exactly as the runtime does), and a scripted model that asks for
a risky tool. Alice asks; Bob is another allowed user; Carol is an admin.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from soulflow.agent.approvals import ApproverPolicy, Decider, Requester, refusal_text
from soulflow.agent.context import ContextBuilder
from soulflow.agent.domain import AgentDomain
from soulflow.agent.memory import MemoryStore
from soulflow.agent.run import events as ev
from soulflow.agent.run.loop import AgentLoop
from soulflow.agent.tools.base import ChatRef, ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.backends.base import ApprovalMap
from soulflow.backends.file.approvals import FileApprovalMap
from soulflow.backends.file.backend import FileBackend
from soulflow.backends.file.decisions import FileDecisionStore
from soulflow.backends.file.runs import FileRunJournal
from soulflow.backends.file.sessions import FileSessionStore
from soulflow.bus.bus import MessageBus
from soulflow.channels.base import ChannelAdapter, ChannelLimits
from soulflow.channels.registry import ChannelRegistry
from soulflow.contracts import (
    ApprovalRef,
    InboundMessage,
    OutboundMessage,
    ProviderResult,
    SendResult,
    ToolCall,
)
from soulflow.conversation.access import AccessPolicy
from soulflow.conversation.turns import Conversation
from soulflow.decision.service import DecisionService
from soulflow.storage.beneath import Beneath
from tests.agent.recorder import Recorder

ALICE, BOB, CAROL = "U_ALICE", "U_BOB", "U_CAROL"
NAMES = {ALICE: "Alice", BOB: "Bob", CAROL: "Carol"}
REFUSAL = "Only Alice or an admin can decide this approval."


class ChatAdapter(ChannelAdapter):
    """A platform whose sends succeed and get a platform id (the outbox message id)."""

    name = "chat"
    limits = ChannelLimits(max_text=4000, chunk_size=3900, file_fallback_threshold=100_000)

    def __init__(self) -> None:
        self.sent: list[OutboundMessage] = []

    async def read(self) -> list[InboundMessage]:
        return []

    def commit(self, messages: list[InboundMessage]) -> None:
        return None

    async def send(self, message: OutboundMessage) -> SendResult:
        self.sent.append(message)
        return SendResult(platform_message_ids=[message.message_id])


class RiskyModel:
    """Asks for `record` on a new request; answers "recorded" once the tool result is in."""

    name = "scripted"

    async def chat(self, messages: list[dict[str, Any]], tools: Any = None, *,
                   on_stream: Any = None, abort: Any = None) -> ProviderResult:
        if messages[-1]["role"] == "tool":
            return ProviderResult(content=f"done: {messages[-1]['content']}")
        return ProviderResult(content="", tool_calls=[
            ToolCall(id="c1", name="record", arguments={"value": messages[-1]["content"]})])

    async def close(self) -> None:
        return None


@dataclass
class Pipeline:
    conversation: Conversation
    agent: AgentDomain
    adapter: ChatAdapter
    tool: Recorder
    bus: MessageBus
    counter: list[int]

    async def say(self, user: str, text: str) -> InboundMessage:
        self.counter[0] += 1
        message = InboundMessage(provider="chat", chat_id="team", sender_id=user,
                                 sender_name=NAMES[user], text=text,
                                 message_id=f"m{self.counter[0]}")
        assert await self.conversation.ingest(self.adapter, [message]) == [message]
        return message

    async def react(self, user: str, emoji: str, target: OutboundMessage) -> None:
        self.counter[0] += 1
        reaction = InboundMessage(provider="chat", chat_id="team", sender_id=user,
                                  sender_name=NAMES[user], text="", kind="reaction",
                                  reaction=emoji, message_id=f"r{self.counter[0]}",
                                  target_message_id=target.message_id)
        await self.conversation.ingest(self.adapter, [reaction])

    async def sent_after(self, count: int, what: Callable[[str], bool]) -> OutboundMessage:
        async with asyncio.timeout(5):
            while True:
                found = [m for m in self.adapter.sent[count:] if what(m.content)]
                if found:
                    return found[0]
                await asyncio.sleep(0.005)

    async def ask(self, text: str, user: str = ALICE) -> OutboundMessage:
        """`user` asks for something risky; returns the remembered approval request."""
        count = len(self.adapter.sent)
        await self.say(user, text)
        request = await self.sent_after(count, lambda c: c.startswith("Approval needed"))
        approvals = self.agent.approvals
        assert approvals is not None
        async with asyncio.timeout(5):
            while approvals.lookup("chat:team", request.message_id) is None:
                await asyncio.sleep(0.005)
        return request

    async def drained(self) -> None:
        """Every message handled and every reply sent (a reaction is handled in the chat's
        queue: a later message in the same chat is handled after it)."""
        count = len(self.adapter.sent)
        await self.say(ALICE, "/help")
        await self.sent_after(count, lambda c: True)

    def waiting(self) -> bool:
        open_run = self.agent.open_run("chat:team")
        return open_run is not None and open_run[1] == ev.WAITING_APPROVAL


def wire_chat(bus: MessageBus, agent: AgentDomain, approvals: ApprovalMap, tmp_path: Path
              ) -> tuple[ChatAdapter, Conversation]:
    """The chat channel on `bus` as the runtime wires it: the adapter sends the bus's replies,
    a sent approval prompt is remembered (so a reaction to it finds its run), and the conversation
    lets ALICE, BOB and CAROL in. Shared by the Redis two-node test."""
    adapter = ChatAdapter()
    registry = ChannelRegistry()
    registry.register(adapter)
    bus.bind_senders(registry.get)

    def remember(message: OutboundMessage, result: SendResult) -> None:  # as the runtime does
        approval = message.announces
        if isinstance(approval, ApprovalRef) and result.platform_message_ids:
            approvals.remember(message.chat_key, result.platform_message_ids,
                               approval.run_id, approval.approval_id)

    bus.dispatcher.sent_listeners.append(remember)
    conversation = Conversation(registry, bus, agent,
                             access=AccessPolicy.from_lists({"chat": [ALICE, BOB, CAROL]}),
                             workspace=tmp_path)
    return adapter, conversation


async def _pipeline(tmp_path: Path, tool: Recorder, counter: list[int]
                    ) -> AsyncIterator[Pipeline]:
    """The pipeline over the files in `tmp_path`: building it twice is a restart."""
    bus = MessageBus(FileBackend(tmp_path / "runtime", node_id="test"))
    sessions = FileSessionStore(tmp_path / "sessions")
    context = ContextBuilder(tmp_path, MemoryStore(Beneath(tmp_path)),
                             DecisionService(FileDecisionStore(tmp_path / "d.json")), sessions)
    tools = ToolRegistry()
    tools.register(tool)
    loop = AgentLoop(FileRunJournal(tmp_path / "threads"), RiskyModel, tools,
                     context.system_prompt,
                     lambda state, approved: ToolContext(tmp_path, ChatRef("chat", "team"),
                                                         approved=approved))
    approvals = FileApprovalMap(tmp_path / "approvals.json")
    admins = {("chat", CAROL)}
    agent = AgentDomain(context, sessions, loop, approvals,
                        approvers=ApproverPolicy(lambda p, u: (p, u) in admins))
    adapter, conversation = wire_chat(bus, agent, approvals, tmp_path)
    await bus.start()
    claiming = asyncio.create_task(conversation.claim_loop(), name="inbound:claim")
    try:
        yield Pipeline(conversation, agent, adapter, tool, bus, counter)
    finally:
        claiming.cancel()
        await asyncio.gather(claiming, return_exceptions=True)
        await conversation.stop(5)
        await bus.stop(5)
        await bus.backend.stop()


@pytest.fixture
def tool() -> Recorder:
    return Recorder(risky=True)


@pytest.fixture
async def pipe(tmp_path: Path, tool: Recorder) -> AsyncIterator[Pipeline]:
    async for built in _pipeline(tmp_path, tool, [0]):
        yield built


async def test_another_users_ok_is_refused_and_changes_nothing(pipe: Pipeline) -> None:
    await pipe.ask("plan A")
    for word in ("ok", "approve", "✅", "deny", "cancel", "승인"):
        count = len(pipe.adapter.sent)
        await pipe.say(BOB, word)
        refusal = await pipe.sent_after(count, lambda c: True)
        assert refusal.content == REFUSAL
    assert pipe.tool.calls == [] and pipe.waiting()
    assert pipe.agent.loop is not None
    run_id = pipe.agent.loop.store.find(chat_key="chat:team")[-1]
    assert not [e for e in pipe.agent.loop.store.events(run_id)
                if e.type == ev.APPROVAL_DECIDED]  # refusals leave no trace in the run
    count = len(pipe.adapter.sent)
    await pipe.say(ALICE, "ok")
    done = await pipe.sent_after(count, lambda c: c.startswith("done:"))
    assert done.content == "done: recorded plan A" and pipe.tool.calls == ["plan A"]
    decided = [e.data for e in pipe.agent.loop.store.events(run_id)
               if e.type == ev.APPROVAL_DECIDED]
    assert [(d["by"], d["by_provider"], d["decision"]) for d in decided] == \
        [(ALICE, "chat", "approve")]


async def test_another_users_reaction_is_ignored_an_admins_decides(pipe: Pipeline) -> None:
    request = await pipe.ask("plan B")
    await pipe.react(BOB, "white_check_mark", request)
    await pipe.react(BOB, "x", request)
    await pipe.drained()
    assert pipe.tool.calls == [] and pipe.waiting()
    assert not [m for m in pipe.adapter.sent if m.content == REFUSAL]  # ignored, not answered
    count = len(pipe.adapter.sent)
    await pipe.react(CAROL, "white_check_mark", request)
    done = await pipe.sent_after(count, lambda c: c.startswith("done:"))
    assert done.content == "done: recorded plan B" and pipe.tool.calls == ["plan B"]


async def test_the_requesters_reaction_and_an_admins_reply_decide(pipe: Pipeline) -> None:
    request = await pipe.ask("plan C")
    count = len(pipe.adapter.sent)
    await pipe.react(ALICE, "+1", request)
    await pipe.sent_after(count, lambda c: c == "done: recorded plan C")
    await pipe.ask("plan D")
    count = len(pipe.adapter.sent)
    await pipe.say(CAROL, "deny")
    denied = await pipe.sent_after(count, lambda c: c.startswith("done:"))
    assert "denied" in denied.content and pipe.tool.calls == ["plan C"]


async def test_in_a_group_each_ok_decides_its_authors_own_approval(pipe: Pipeline) -> None:
    """Alice and Bob each wait for an approval in one chat: the latest is Bob's, yet Alice's
    "ok" decides hers (not refused on his), and Bob's then decides his."""
    await pipe.ask("plan F")
    await pipe.ask("plan G", user=BOB)
    count = len(pipe.adapter.sent)
    await pipe.say(ALICE, "ok")
    assert (await pipe.sent_after(count, lambda c: True)).content == "done: recorded plan F"
    assert pipe.tool.calls == ["plan F"] and pipe.waiting()
    count = len(pipe.adapter.sent)
    await pipe.say(BOB, "ok")
    assert (await pipe.sent_after(count, lambda c: True)).content == "done: recorded plan G"
    assert pipe.tool.calls == ["plan F", "plan G"] and not pipe.waiting()


async def test_the_binding_survives_a_restart(tmp_path: Path, tool: Recorder) -> None:
    counter = [0]
    async for before in _pipeline(tmp_path, tool, counter):
        request = await before.ask("plan E")
    async for after in _pipeline(tmp_path, tool, counter):
        assert after.waiting()
        count = len(after.adapter.sent)
        await after.say(BOB, "approve")
        assert (await after.sent_after(count, lambda c: True)).content == REFUSAL
        await after.react(BOB, "white_check_mark", request)
        await after.drained()
        assert tool.calls == [] and after.waiting()
        count = len(after.adapter.sent)
        await after.react(ALICE, "white_check_mark", request)
        await after.sent_after(count, lambda c: c == "done: recorded plan E")
        assert tool.calls == ["plan E"]


def test_who_may_decide() -> None:
    policy = ApproverPolicy(lambda provider, user: (provider, user) == ("slack", "UADMIN"))
    alice = Requester("slack", "UALICE", "Alice")
    assert policy.may_decide(alice, Decider("slack", "UALICE"))
    assert policy.may_decide(alice, Decider("slack", "UADMIN"))
    assert policy.may_decide(alice, Decider("local", "operator"))  # the operator, always
    assert not policy.may_decide(alice, Decider("slack", "UBOB"))
    assert not policy.may_decide(alice, Decider("discord", "UALICE"))  # same id elsewhere
    assert not policy.may_decide(alice, Decider("telegram", "UADMIN"))
    nobody = Requester.of_run(ChatRef.from_dict({"provider": "slack", "sender_id": "cron",
                                                        "requester_id": ""}))
    assert not policy.may_decide(nobody, Decider("slack", "cron"))  # a cron run: admins only
    assert policy.may_decide(nobody, Decider("slack", "UADMIN"))
    legacy = Requester.of_run(ChatRef.from_dict({"provider": "slack",  # older journal
                                                        "sender_id": "UALICE"}))
    assert policy.may_decide(legacy, Decider("slack", "UALICE"))
    assert not ApproverPolicy().may_decide(alice, Decider("slack", "UADMIN"))  # no admins
    assert refusal_text(Requester("slack", "UALICE")) == \
        "Only UALICE or an admin can decide this approval."
