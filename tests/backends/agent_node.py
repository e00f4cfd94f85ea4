"""A node that runs one agent run on the Redis stores, in its own process, to be SIGKILLed.

    python -m tests.backends.agent_node REDIS_URL PREFIX NODE_ID TTL_S MODE

Takes the partitions (alone: all of them), starts a run in `telegram:42` whose model asks for
the `record` tool, and then, by MODE:
- `tool`: the tool blocks forever; prints `started <run id>` once its call is journaled;
- `approval`: the tool needs approval; the run waits, the prompt's platform message id `900`
  is remembered in the approvals map; prints `waiting <run id> <approval id>`.
Then it keeps its leases alive until it is killed.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from soulflow.agent.run.loop import AgentLoop
from soulflow.agent.tools.base import Tool, ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.backends.redis.approvals import RedisApprovalMap
from soulflow.backends.redis.backend import RedisBackend
from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.runs import RedisRunJournal, partition_fence
from soulflow.backends.redis.sync_client import StateRedis, sync_client
from soulflow.contracts import ChatRef
from tests.agent.recorder import Recorder
from tests.agent.test_run_loop import ScriptedModel, call

PARTITIONS = 4
CHAT = ChatRef("telegram", "42", sender_id="u1", requester_id="u1", session_key="telegram:42")
PROMPT_MESSAGE_ID = "900"


class Stuck(Recorder):
    """`record` that never returns: the node is killed while it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> str:
        self.entered.set()
        await asyncio.Event().wait()
        return "never"


async def main(url: str, prefix: str, node_id: str, ttl_s: float, mode: str) -> None:
    backend = RedisBackend(AsyncStoreRedis.from_url(url), node_id=node_id, prefix=prefix,
                           partitions=PARTITIONS, lease_ttl_s=ttl_s)
    await backend.start()
    state = StateRedis(sync_client(url), prefix)
    tool: Tool = Stuck() if mode == "tool" else Recorder(risky=True)
    registry = ToolRegistry()
    registry.register(tool)
    loop = AgentLoop(RedisRunJournal(state, fence=partition_fence(backend)),
                     lambda: ScriptedModel(call("record", value="x")), registry,
                     lambda _chat: "system", lambda run, approved: ToolContext(
                         workspace=".", chat=CHAT, approved=approved))
    run_id = loop.begin(chat=CHAT, text="record x", history=[])
    if isinstance(tool, Stuck):
        driving = asyncio.create_task(loop.drive(run_id), name="drive")
        await tool.entered.wait()
        print(f"started {run_id}", flush=True)
        await driving
    else:
        outcome = await loop.drive(run_id)
        assert outcome.approval_id is not None
        RedisApprovalMap(state).remember(CHAT.key, [PROMPT_MESSAGE_ID], run_id,
                                              outcome.approval_id)
        print(f"waiting {run_id} {outcome.approval_id}", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    url, prefix, node_id, ttl_s, mode = sys.argv[1:6]
    asyncio.run(main(url, prefix, node_id, float(ttl_s), mode))
