"""Approvals across nodes, through the real inbound pipeline on Redis.

Two nodes share one Redis: the owner holds every partition of chats (it runs the chat's turns,
sends its replies), the reader holds none (as a node that only reads a platform account, or
one whose partitions are elsewhere). Everything is read on the reader. Messages are journaled
for the owner as always; a reaction to an approval prompt, which a single daemon acts on as it
reads it, is journaled too when its chat is another node's, so the owner decides it: the run
and the approved tool call stay on the chat's node, and who may decide is checked there.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from soulflow.agent.approvals import ApproverPolicy
from soulflow.agent.context import ContextBuilder
from soulflow.agent.domain import AgentDomain
from soulflow.agent.memory import MemoryStore
from soulflow.agent.run.loop import AgentLoop
from soulflow.agent.tools.base import ChatRef, ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.backends.file.decisions import FileDecisionStore
from soulflow.backends.redis.approvals import RedisApprovalMap
from soulflow.backends.redis.backend import RedisBackend
from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.runs import RedisRunJournal, partition_fence
from soulflow.backends.redis.sessions import RedisSessionStore
from soulflow.backends.redis.sync_client import StateRedis, sync_client
from soulflow.bus.bus import MessageBus
from soulflow.contracts import InboundMessage
from soulflow.decision.service import DecisionService
from soulflow.storage.beneath import Beneath
from tests.agent.recorder import Recorder
from tests.agent.test_approval_people import (
    ALICE,
    BOB,
    CAROL,
    Pipeline,
    RiskyModel,
    wire_chat,
)
from tests.backends.redis_server import RedisServer
from tests.waiting import until


@asynccontextmanager
async def node(url: str, prefix: str, node_id: str, tmp_path: Path, counter: list[int], *,
               owner: bool) -> AsyncIterator[Pipeline]:
    """One node's pipeline on the shared Redis; only the owner takes partitions and claims."""
    backend = RedisBackend(AsyncStoreRedis.from_url(url), node_id=node_id, prefix=prefix,
                           partitions=4, lease_ttl_s=3.0)
    if owner:
        await backend.start()
    state = StateRedis(sync_client(url), prefix)
    bus = MessageBus(backend)
    sessions = RedisSessionStore(state)
    context = ContextBuilder(tmp_path, MemoryStore(Beneath(tmp_path)),
                             DecisionService(FileDecisionStore(tmp_path / "d.json")), sessions)
    tool = Recorder(risky=True)
    tools = ToolRegistry()
    tools.register(tool)
    loop = AgentLoop(RedisRunJournal(state, fence=partition_fence(backend)), RiskyModel, tools,
                     context.system_prompt,
                     lambda run, approved: ToolContext(tmp_path, ChatRef("chat", "team"),
                                                       approved=approved))
    approvals = RedisApprovalMap(state)
    agent = AgentDomain(context, sessions, loop, approvals,
                        approvers=ApproverPolicy(lambda p, u: (p, u) == ("chat", CAROL)))
    adapter, conversation = wire_chat(bus, agent, approvals, tmp_path)
    await bus.start()
    claiming = asyncio.create_task(conversation.claim_loop(), name=f"inbound:claim:{node_id}") \
        if owner else None
    try:
        yield Pipeline(conversation, agent, adapter, tool, bus, counter)
    finally:
        if claiming is not None:
            claiming.cancel()
            await asyncio.gather(claiming, return_exceptions=True)
        await conversation.stop(5)
        await bus.stop(5)
        await bus.backend.stop()
        state.close()


@asynccontextmanager
async def owner_and_reader(url: str, prefix: str, tmp_path: Path
                           ) -> AsyncIterator[tuple[Pipeline, Pipeline]]:
    """The two nodes on one Redis prefix, sharing one model-call counter: the chats' owner,
    then the reader that holds no partition."""
    counter = [0]
    async with node(url, prefix, "owner", tmp_path / "o", counter, owner=True) as owner, \
            node(url, prefix, "reader", tmp_path / "r", counter, owner=False) as reader:
        yield owner, reader


async def test_a_reaction_read_on_another_node_is_decided_on_the_chats_node(
        redis_server: RedisServer, tmp_path: Path) -> None:
    async with owner_and_reader(redis_server.url, f"t{uuid.uuid4().hex[:10]}:",
                                tmp_path) as (chats_node, reader):
        await reader.say(ALICE, "plan A")
        request = await chats_node.sent_after(0, lambda c: c.startswith("Approval needed"))
        approvals = chats_node.agent.approvals
        assert approvals is not None
        await until(lambda: approvals.lookup("chat:team", request.message_id) is not None)
        sent = len(chats_node.adapter.sent)
        await reader.react(BOB, "👍", request)  # not his to decide: ignored on the chat's node
        await reader.react(ALICE, "👍", request)
        done = await chats_node.sent_after(sent, lambda c: c.startswith("done:"))
        assert done.content == "done: recorded plan A"
        assert chats_node.tool.calls == ["plan A"] and reader.tool.calls == []
        assert reader.adapter.sent == []  # the reader answers nothing: the chat is not its own
        assert [m.content for m in chats_node.adapter.sent[sent:]] == ["done: recorded plan A"]
        async with asyncio.timeout(5):
            while await chats_node.bus.inbound.pending_count():
                await asyncio.sleep(0.01)


async def test_a_decision_for_a_run_taken_over_is_left_to_its_new_node(
        redis_server: RedisServer, tmp_path: Path) -> None:
    """The chat's run was claimed by a newer holder of its partition (as when this node was
    cut off and its lease passed on): a decision that still reaches this node is neither run
    nor quarantined nor answered with an apology; the new holder handles it."""
    prefix = f"t{uuid.uuid4().hex[:10]}:"
    async with owner_and_reader(redis_server.url, prefix, tmp_path) as (old_holder, reader):
        await reader.say(ALICE, "plan B")
        await old_holder.sent_after(0, lambda c: c.startswith("Approval needed"))
        assert old_holder.agent.loop is not None
        [run_id] = old_holder.agent.loop.store.find(chat_key="chat:team")
        state = StateRedis(sync_client(redis_server.url), prefix)
        newer = RedisRunJournal(state, fence=lambda chat: 10**9)  # a later lease's token
        assert newer.claim(run_id)
        old_holder.conversation.release_pause_s = 0.05
        given_back: list[str] = []
        release = old_holder.bus.inbound.release

        async def counted(messages: list[InboundMessage]) -> None:
            given_back.extend(m.key for m in messages)
            await release(messages)

        old_holder.bus.inbound.release = counted  # type: ignore[method-assign]
        sent = len(old_holder.adapter.sent)
        decision = await reader.say(ALICE, "ok")
        # handled, and given back for the run's holder (this node still holds the chat's
        # partition here, so it is handed out again, after a pause each time)
        await until(lambda: given_back.count(decision.key) >= 2)
        assert old_holder.adapter.sent[sent:] == []  # no apology, no answer
        assert old_holder.tool.calls == []
        assert await old_holder.bus.inbound_dlq.count() == 0  # not quarantined
        assert decision.key in {m.key for m in await reader.bus.inbound.pending()}
        state.close()
