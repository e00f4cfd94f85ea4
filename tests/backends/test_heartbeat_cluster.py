"""Two nodes' heartbeats on one Redis: only the node holding the heartbeat's chat (its partition
lease) ticks; when it is cut off from Redis it stops ticking before the other node takes the
partition, and the other goes on from the last tick recorded in Redis. Real agent stacks (the
loopback fake model answers each tick) and real Redis backends (one partition); the cut is a
TCP proxy that blackholes the first node's backend connection. Then: a notice is told once
across nodes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from soulflow.backends.redis.backend import RedisBackend
from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.services import RedisHeartbeatState, RedisNoticeClaims
from soulflow.backends.redis.sync_client import StateRedis
from soulflow.contracts import ChatRef
from soulflow.heartbeat import HeartbeatService
from soulflow.ops.notices import NoticeBoard
from soulflow.ops.single import SingleRunner
from tests.backends.helpers import eventually
from tests.backends.proxy import CuttableProxy
from tests.backends.redis_server import RedisServer
from tests.backends.service_stores import fresh_state, state_redis  # noqa: F401
from tests.fakes.openai_api import FakeOpenAI
from tests.heartbeat.stack import Stack, build_stack

TTL_S = 1.2
INTERVAL_S = 0.2
TARGET = ChatRef("telegram", "-100")
CHECKLIST = "# Heartbeat checklist\n\n- [ ] Check that the backup of /srv ran today\n"


class Node:
    def __init__(self, name: str, stack: Stack, url: str, state: StateRedis) -> None:
        self.name = name
        self.stack = stack
        self.backend = RedisBackend(AsyncStoreRedis.from_url(url, socket_timeout=TTL_S),
                                    prefix=state.prefix, node_id=f"node-{name}", partitions=1,
                                    lease_ttl_s=TTL_S)
        self.single = SingleRunner(self.backend.leases, f"node-{name}", ttl_s=TTL_S)
        self.heartbeat = HeartbeatService(
            stack.workspace, RedisHeartbeatState(state), stack.runner, TARGET,
            interval_s=INTERVAL_S)
        self.ticked_at: list[float] = []
        self.task: asyncio.Task[None] | None = None

    def holds_chat(self) -> bool:
        return self.backend.owns(TARGET.key)

    async def start(self) -> None:
        await self.backend.start()
        tick = self.heartbeat.tick

        async def recorded_tick():  # type: ignore[no-untyped-def]
            result = await tick()
            self.ticked_at.append(time.monotonic())
            return result

        self.heartbeat.tick = recorded_tick  # type: ignore[method-assign]
        self.single.start()
        self.task = asyncio.create_task(self.single.gated("heartbeat", self.heartbeat.run,
                                                          holds=self.holds_chat)())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await self.single.stop()
        await self.stack.close()
        await self.backend.stop()


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


async def test_one_node_ticks_and_the_other_takes_over_when_it_is_cut_off(
        tmp_path: Path, fake: FakeOpenAI, redis_server: RedisServer,
        state_redis: StateRedis) -> None:  # noqa: F811
    proxy = CuttableProxy(redis_server.port)
    await proxy.start()
    nodes: list[Node] = []
    for name, url in (("a", proxy.url), ("b", redis_server.url)):
        stack = build_stack(tmp_path / name, fake.base_url)
        (stack.workspace / "HEARTBEAT.md").write_text(CHECKLIST, encoding="utf-8")
        nodes.append(Node(name, stack, url, state_redis))
    a, b = nodes
    try:
        await a.start()
        await eventually(ticks(a, 2), what="node a to tick")
        await b.start()
        await eventually(ticks(a, 2), what="node a to go on ticking")
        assert a.holds_chat() and not b.holds_chat()
        assert b.ticked_at == [] and b.heartbeat.ticks == 0  # only the chat's holder ticks
        proxy.blackhole()  # a's link to Redis is cut: it cannot renew its partition lease
        await eventually(ticks(b, 2), timeout_s=15.0, what="node b to take the heartbeat over")
        assert a.ticked_at[-1] < b.ticked_at[0]  # never both at once
        assert not a.holds_chat()
        last_of_a = len(a.ticked_at)
        await eventually(ticks(b, 2), what="node b to go on ticking")
        assert len(a.ticked_at) == last_of_a  # a stays stopped
        shared = RedisHeartbeatState(state_redis).load()
        assert float(str(shared["last_tick_at"])) == b.heartbeat.status()["last_tick_at"]
    finally:
        for node in nodes:
            await node.stop()
        await proxy.close()


def ticks(node: Node, more: int) -> Callable[[], Awaitable[bool]]:
    """A check: `node` ticked `more` times after now."""
    target = len(node.ticked_at) + more

    async def check() -> bool:
        return len(node.ticked_at) >= target
    return check


async def test_a_notice_is_told_once_across_the_nodes(state_redis: StateRedis,  # noqa: F811
                                                redis_server: RedisServer) -> None:
    sent: dict[str, list[str]] = {"a": [], "b": []}
    boards = {name: NoticeBoard(sent[name].append, after_s=10.0, interval_s=60.0,
                                claim=RedisNoticeClaims(
                                    fresh_state(redis_server.url, state_redis.prefix),
                                    f"node-{name}"))
              for name in ("a", "b")}
    problem = {"provider:openrouter": "model provider openrouter is down"}
    for name, board in boards.items():
        assert await board.update(problem, 0.0) == [] and sent[name] == []
    told = [name for name, board in boards.items() if await board.update(problem, 11.0)]
    assert len(told) == 1 and len(sent[told[0]]) == 1
    assert "openrouter is down" in sent[told[0]][0]
    for board in boards.values():  # resolved: only the node that told it says so
        await board.update({}, 20.0)
    assert [len(sent[name]) for name in ("a", "b")] == \
        [2 if name == told[0] else 0 for name in ("a", "b")]
