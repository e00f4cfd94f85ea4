"""A write to the operator's files waits for an admin, through the real inbound pipeline.

Conversation → AgentDomain → AgentLoop with its journal and the real `write_file` tool: Alice
asks the model to change templates/ (what every chat's runs load). The prompt says only an
admin can approve it; Alice's own "approve" and reaction are refused, Bob's too, nothing is
written; Carol (an admin) or the local operator approves and the file is written. A run
recorded before approvals carried `admins_only` is decided as it always was.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from soulflow.agent.approvals import ApproverPolicy, Decider
from soulflow.agent.context import ContextBuilder
from soulflow.agent.domain import AgentDomain
from soulflow.agent.memory import MemoryStore
from soulflow.agent.run import events as ev
from soulflow.agent.run.loop import AgentLoop
from soulflow.agent.tools.base import ChatRef, ToolContext
from soulflow.agent.tools.files import WriteFileTool
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.backends.file.approvals import FileApprovalMap
from soulflow.backends.file.backend import FileBackend
from soulflow.backends.file.decisions import FileDecisionStore
from soulflow.backends.file.runs import FileRunJournal
from soulflow.backends.file.sessions import FileSessionStore
from soulflow.bus.bus import MessageBus
from soulflow.contracts import ProviderResult, ReplyStatus, ToolCall
from soulflow.decision.service import DecisionService
from soulflow.storage.beneath import Beneath
from tests.agent.test_approval_people import ALICE, BOB, CAROL, Pipeline, wire_chat

TARGET = "templates/rules.md"
PROMPT_LINE = ("Only an admin can approve this: it changes the operator's files "
               "(templates/rules.md).")


class PlantingModel:
    """Asks to write the request's text into templates/; reports the tool's answer."""

    name = "scripted"

    async def chat(self, messages: list[dict[str, Any]], tools: Any = None, *,
                   on_stream: Any = None, abort: Any = None) -> ProviderResult:
        if messages[-1]["role"] == "tool":
            return ProviderResult(content=f"done: {messages[-1]['content']}")
        return ProviderResult(content="", tool_calls=[ToolCall(
            id="c1", name="write_file",
            arguments={"path": TARGET, "content": messages[-1]["content"]})])

    async def close(self) -> None:
        return None


@pytest.fixture
async def pipe(tmp_path: Path) -> AsyncIterator[Pipeline]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    bus = MessageBus(FileBackend(tmp_path / "runtime", node_id="test"))
    sessions = FileSessionStore(tmp_path / "sessions")
    context = ContextBuilder(tmp_path, MemoryStore(Beneath(tmp_path)),
                             DecisionService(FileDecisionStore(tmp_path / "d.json")), sessions)
    tools = ToolRegistry()
    tools.register(WriteFileTool())
    loop = AgentLoop(FileRunJournal(tmp_path / "threads"), PlantingModel, tools,
                     context.system_prompt,
                     lambda state, approved: ToolContext(workspace, state.chat,
                                                         approved=approved))
    approvals = FileApprovalMap(tmp_path / "approvals.json")
    agent = AgentDomain(context, sessions, loop, approvals,
                        approvers=ApproverPolicy(lambda p, u: (p, u) == ("chat", CAROL)))
    adapter, conversation = wire_chat(bus, agent, approvals, tmp_path)
    await bus.start()
    claiming = asyncio.create_task(conversation.claim_loop(), name="inbound:claim")
    try:
        yield Pipeline(conversation, agent, adapter, None, bus, [0])  # type: ignore[arg-type]
    finally:
        claiming.cancel()
        await asyncio.gather(claiming, return_exceptions=True)
        await conversation.stop(5)
        await bus.stop(5)
        await bus.backend.stop()


async def test_the_requester_cannot_approve_her_own_write_an_admin_can(
        pipe: Pipeline, tmp_path: Path) -> None:
    request = await pipe.ask("always answer in pirate speak")
    assert PROMPT_LINE in request.content and "Reason:" not in request.content
    target = tmp_path / "ws" / TARGET
    for who, word in ((ALICE, "approve"), (ALICE, "ok"), (BOB, "approve")):
        count = len(pipe.adapter.sent)
        await pipe.say(who, word)
        refusal = await pipe.sent_after(count, lambda c: True)
        assert refusal.content == PROMPT_LINE, (who, word)
    await pipe.react(ALICE, "white_check_mark", request)
    await pipe.drained()
    assert not target.exists() and pipe.waiting()
    assert pipe.agent.loop is not None
    run_id = pipe.agent.loop.store.find(chat_key="chat:team")[-1]
    events = pipe.agent.loop.store.events(run_id)
    asked = [e.data for e in events if e.type == ev.APPROVAL_REQUESTED]
    assert [a["admins_only"] for a in asked] == [True]
    assert not [e for e in events if e.type == ev.APPROVAL_DECIDED]

    count = len(pipe.adapter.sent)
    await pipe.react(CAROL, "white_check_mark", request)
    done = await pipe.sent_after(count, lambda c: c.startswith("done:"))
    assert done.content == f"done: created {TARGET} (29 bytes)"
    assert target.read_text() == "always answer in pirate speak"


async def test_the_local_operator_approves_an_admins_only_write(pipe: Pipeline,
                                                                tmp_path: Path) -> None:
    await pipe.ask("be terse")
    assert pipe.agent.loop is not None
    run_id = pipe.agent.loop.store.find(chat_key="chat:team")[-1]
    refused = await pipe.agent.decide(run_id, "approve", by=Decider("chat", ALICE))
    assert refused is not None and refused.status == ReplyStatus.REFUSED
    assert refused.content == PROMPT_LINE
    assert pipe.agent.open_run("chat:team", by=Decider("chat", ALICE)) is not None
    reply = await pipe.agent.decide(run_id, "approve",
                                    by=Decider("local", "dashboard", "the dashboard"))
    assert reply is not None and reply.content == f"done: created {TARGET} (8 bytes)"
    assert (tmp_path / "ws" / TARGET).read_text() == "be terse"


async def test_an_approval_recorded_before_admins_only_is_an_ordinary_one(
        pipe: Pipeline, tmp_path: Path) -> None:
    """A journal written before the flag existed: the request event has no `admins_only`, so
    the requester decides it as she could then (the tool itself ran approved back then too)."""
    loop = pipe.agent.loop
    assert loop is not None
    chat = ChatRef("chat", "team", sender_id=ALICE, requester_id=ALICE, session_key="chat:team")
    run_id = loop.begin(chat=chat, text="old", history=[])
    loop.store.append(run_id, ev.Event(ev.MODEL_TURN, {"content": "", "provider": "scripted",
                                                       "tool_calls": [{
                                                           "id": "t1.c1", "name": "write_file",
                                                           "arguments": {"path": TARGET,
                                                                         "content": "old"}}]}))
    loop.store.append(run_id, ev.Event(ev.TOOL_CALL_STARTED, {"id": "t1.c1",
                                                              "name": "write_file"}))
    loop.store.append(run_id, ev.Event(ev.APPROVAL_REQUESTED, {
        "approval_id": "ap_00000001", "call_id": "t1.c1", "tool": "write_file",
        "arguments": {"path": TARGET, "content": "old"},
        "reason": "writes outside safe paths (templates/rules.md)"}))
    approval = loop.store.state(run_id).open_approval()
    assert approval is not None and approval["admins_only"] is False
    reply = await pipe.agent.decide(run_id, "approve", by=Decider("chat", ALICE))
    assert reply is not None and reply.status == ReplyStatus.ANSWERED, reply
    assert (tmp_path / "ws" / TARGET).read_text() == "old"
