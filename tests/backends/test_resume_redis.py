"""An agent run whose node is SIGKILLed goes on at the node that takes its chat over.

Node A is a real process (tests/backends/agent_node.py) on the Redis stores and partition
leases; it is killed in the middle of a tool call, or while its run waits for an approval.
Node B, in this process, takes the partitions once A's leases expire, and then:
- resumes the run with the same rules as after a restart: the interrupted tool is reported
  to the model, not run again;
- decides the approval A asked for, from a reaction to A's prompt message (the map is in
  Redis), and the run finishes on B.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from soulflow.agent.approvals import Decider
from soulflow.agent.context import ContextBuilder
from soulflow.agent.domain import AgentDomain
from soulflow.agent.memory import MemoryStore
from soulflow.agent.run import events as ev
from soulflow.agent.run.loop import INTERRUPTED, AgentLoop
from soulflow.agent.tools.base import ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.backends.file.decisions import FileDecisionStore
from soulflow.backends.redis.approvals import RedisApprovalMap
from soulflow.backends.redis.backend import RedisBackend
from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.keys import partition_of
from soulflow.backends.redis.runs import RedisRunJournal, partition_fence
from soulflow.backends.redis.sessions import RedisSessionStore
from soulflow.backends.redis.sync_client import StateRedis, sync_client
from soulflow.contracts import ChatRef, ReplyStatus
from soulflow.decision.service import DecisionService
from soulflow.storage.beneath import Beneath
from tests.agent.recorder import Recorder
from tests.agent.test_run_loop import ScriptedModel, call, reply
from tests.backends.agent_node import CHAT, PARTITIONS, PROMPT_MESSAGE_ID, Stuck
from tests.backends.conftest import Harness
from tests.backends.helpers import eventually
from tests.backends.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]
TTL_S = 1.0


@dataclass
class NodeB:
    backend: RedisBackend
    domain: AgentDomain
    model: ScriptedModel
    tool: Recorder
    state: StateRedis

    def owns(self, chat_key: str) -> bool:
        return partition_fence(self.backend)(chat_key) is not None


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}:"


async def kill_node_a(url: str, prefix: str, mode: str) -> list[str]:
    """Run node A until its run reaches `mode`'s point, SIGKILL it, return its report."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.backends.agent_node", url, prefix, "node-a", str(TTL_S),
        mode, cwd=ROOT, stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), timeout=30)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGKILL)
        await asyncio.wait_for(process.wait(), timeout=10)
    assert line, "node A exited before its run got there"
    return line.decode().split()


@pytest.fixture
async def node_b(redis_server: RedisServer, prefix: str,
                 tmp_path: Path) -> AsyncIterator[NodeB]:
    """Built before node A runs (so nothing here holds a lease yet), started by `take_over`."""
    backend = RedisBackend(AsyncStoreRedis.from_url(redis_server.url), node_id="node-b",
                           prefix=prefix, partitions=PARTITIONS, lease_ttl_s=TTL_S)
    state = StateRedis(sync_client(redis_server.url), prefix)
    sessions = RedisSessionStore(state)
    context = ContextBuilder(tmp_path, MemoryStore(Beneath(tmp_path)),
                             DecisionService(FileDecisionStore(tmp_path / "decisions.json")),
                             sessions)
    model = ScriptedModel()
    tool = Recorder(risky=True)
    registry = ToolRegistry()
    registry.register(tool)
    loop = AgentLoop(RedisRunJournal(state, fence=partition_fence(backend)), lambda: model,
                     registry, context.system_prompt,
                     lambda run, approved: ToolContext(tmp_path, CHAT, approved=approved))
    node = NodeB(backend, AgentDomain(context, sessions, loop, RedisApprovalMap(state)),
                 model, tool, state)
    yield node
    await backend.stop()
    state.close()


async def take_over(node: NodeB) -> None:
    await node.backend.start()

    async def holds_the_chat() -> bool:
        return node.owns(CHAT.key)

    await eventually(holds_the_chat, timeout_s=10 * TTL_S,
                     what="node B holds the chat once node A's lease expired")


async def test_a_run_killed_mid_tool_resumes_on_the_new_holder(
        redis_server: RedisServer, prefix: str, node_b: NodeB) -> None:
    _, run_id = await kill_node_a(redis_server.url, prefix, "tool")
    assert await node_b.domain.resumable_runs(lambda chat: False) == []  # not this node's chat
    await take_over(node_b)
    assert await node_b.domain.resumable_runs(node_b.owns) == [run_id]
    assert await node_b.domain.resumable_runs(node_b.owns) == []  # handed out once
    node_b.model.turns = [reply("I could not confirm it was recorded.")]
    answer = await node_b.domain.resume(run_id)
    assert (answer.status, answer.content) == (ReplyStatus.ANSWERED,
                                               "I could not confirm it was recorded.")
    assert node_b.tool.calls == []  # not idempotent: reported, never run twice
    assert node_b.model.seen[-1][-1] == {"role": "tool", "tool_call_id": "t1.c_record",
                                         "content": INTERRUPTED}
    assert node_b.domain.sessions.last(CHAT.session_key, 1)[0]["content"] == answer.content
    assert await node_b.domain.resumable_runs(node_b.owns) == []  # finished


async def test_an_approval_asked_on_a_dead_node_is_decided_on_the_new_holder(
        redis_server: RedisServer, prefix: str, node_b: NodeB) -> None:
    _, run_id, approval_id = await kill_node_a(redis_server.url, prefix, "approval")
    await take_over(node_b)
    assert await node_b.domain.resumable_runs(node_b.owns) == []  # waiting is not running
    approvals = node_b.domain.approvals
    assert approvals is not None
    entry = approvals.lookup(CHAT.key, PROMPT_MESSAGE_ID)  # a 👍 on A's prompt, read by B
    assert entry == {"run_id": run_id, "approval_id": approval_id}
    stranger = await node_b.domain.decide(run_id, "approve", by=Decider("telegram", "u2"),
                                          approval_id=approval_id)
    assert stranger is not None and stranger.status is ReplyStatus.REFUSED
    node_b.model.turns = [reply("Recorded x.")]
    answer = await node_b.domain.decide(run_id, "approve", by=Decider("telegram", "u1"),
                                        approval_id=approval_id)
    assert answer is not None and (answer.status, answer.content) == (ReplyStatus.ANSWERED,
                                                                      "Recorded x.")
    assert node_b.tool.calls == ["x"]
    assert node_b.domain.loop is not None
    assert node_b.domain.loop.store.state(run_id).status == ev.COMPLETED
    assert approvals.lookup(CHAT.key, PROMPT_MESSAGE_ID) is None  # forgotten with the run


async def test_a_partition_with_a_run_being_driven_is_kept_in_a_rebalance(
        redis_harness: Harness) -> None:
    """A node that joins takes its share, but not the partition of a run this node is in the
    middle of (its message long answered: only the run holds the partition), so the run is
    not taken over mid-tool and reported interrupted while it was fine."""
    node_a = await redis_harness.open("node-a", lease_ttl_s=TTL_S, partitions=2)
    assert isinstance(node_a, RedisBackend) and node_a.partitions.held() == [0, 1]
    chat = next(ChatRef("telegram", str(n)) for n in range(100)
                if partition_of(f"telegram:{n}", 2) == 1)  # the one node A would give first
    assert redis_harness.redis_url
    state = StateRedis(sync_client(redis_harness.redis_url), redis_harness.prefix)
    tool = Stuck()
    registry = ToolRegistry()
    registry.register(tool)
    loop = AgentLoop(RedisRunJournal(state, fence=partition_fence(node_a)),
                     lambda: ScriptedModel(call("record", value="x")), registry,
                     lambda _chat: "system", lambda run, approved: ToolContext(".", chat))
    node_a.hold_chats(lambda: list(loop.driving.values()))  # as runtime.wiring does
    driving = asyncio.create_task(loop.drive(loop.begin(chat=chat, text="x", history=[])),
                                  name="drive")
    try:
        await asyncio.wait_for(tool.entered.wait(), timeout=10)
        node_b = await redis_harness.open("node-b", lease_ttl_s=TTL_S, partitions=2)
        assert isinstance(node_b, RedisBackend)

        async def shared() -> bool:
            return node_b.partitions.held() == [0]

        await eventually(shared, timeout_s=10 * TTL_S, what="node B to take its share")
        assert node_a.partitions.held() == [1]  # the run's partition stayed
    finally:
        driving.cancel()
        await asyncio.gather(driving, return_exceptions=True)
        state.close()
