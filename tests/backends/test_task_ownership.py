"""Two task engines on one Redis: a task runs on the node that holds its chat's partition, and
when that node dies the node that takes the partition resumes it from its checkpoint, by the
rules of a restart; at no moment do both nodes run the same task."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from soulflow.backends.redis.backend import RedisBackend
from soulflow.backends.redis.keys import partition_of
from soulflow.backends.redis.tasks import PartitionFence, RedisTaskStore
from soulflow.tasks import (
    NodeOutcome,
    NodeStatus,
    TaskEngine,
    TaskFenced,
    TaskGraph,
    TaskStatus,
)
from soulflow.tasks.answers import require
from tests.backends.conftest import Harness
from tests.backends.task_stores import TaskWorld, redis_world
from tests.tasks.helpers import Toolbox, gate, tool
from tests.waiting import until

__all__ = ["redis_world"]  # fixture, imported for pytest

TTL_S = 1.0
PARTITIONS = 4


@dataclass
class Cluster:
    """Where each step ran, and which steps run right now on which node."""

    ran: list[tuple[str, str, str]] = field(default_factory=list)  # (node, task, step)
    active: dict[str, set[str]] = field(default_factory=dict)  # task -> nodes running it
    overlaps: list[str] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def toolbox(self, node: str) -> Toolbox:
        async def step(params: dict[str, Any], abort: asyncio.Event) -> NodeOutcome:
            task = str(params["task"])
            self.ran.append((node, task, str(params["step"])))
            running = self.active.setdefault(task, set())
            running.add(node)
            if len(running) > 1:
                self.overlaps.append(f"{task} on {sorted(running)}")
            try:
                if params.get("wait"):
                    await self.release.wait()
                return NodeOutcome.ok({"by": node})
            finally:
                running.discard(node)

        return Toolbox({"step": step, "write": step}, idempotent={"step"})


@dataclass
class Node:
    name: str
    backend: RedisBackend
    engine: TaskEngine
    watch: asyncio.Task[None]


@dataclass
class Nodes:
    """The nodes a test opens on one Redis, sharing one `Cluster` record; every node opened is
    stopped when the test ends, passed or failed (see the `nodes` fixture)."""

    harness: Harness
    world: TaskWorld
    cluster: Cluster = field(default_factory=Cluster)
    opened: list[Node] = field(default_factory=list)

    async def open(self, name: str) -> Node:
        backend = await self.harness.open(name, lease_ttl_s=TTL_S, partitions=PARTITIONS)
        assert isinstance(backend, RedisBackend)
        fence = PartitionFence(backend)
        store = RedisTaskStore(self.world.state(), self.world.keys, fence=fence)
        engine = TaskEngine(store, self.cluster.toolbox(name).executors(), owns=fence.owns)
        backend.hold_chats(engine.running_chats)  # as the daemon's task wiring does
        backend.on_partitions_changed(engine.partitions_changed)
        await engine.start()
        watch = asyncio.create_task(engine.watch(0.05), name=f"tasks:ownership:{name}")
        node = Node(name, backend, engine, watch)
        self.opened.append(node)
        return node

    async def stop_all(self) -> None:
        for node in self.opened:
            node.watch.cancel()
            await asyncio.gather(node.watch, return_exceptions=True)
            await node.engine.stop()
        self.opened.clear()


def freeze(node: Node) -> None:
    """The node dies as far as Redis can tell: its leases are no longer renewed (and its
    engine is left running, as a node cut off from Redis would be)."""

    async def never() -> None:
        await asyncio.Event().wait()

    node.backend.partitions.rebalance = never  # type: ignore[method-assign]


def chats_of(node: Node, count: int) -> list[str]:
    """`count` chat ids of the telegram chats whose partition `node` holds."""
    held = set(node.backend.partitions.held())
    found = [str(n) for n in range(200)
             if partition_of(f"telegram:{n}", PARTITIONS) in held]
    assert len(found) >= count
    return found[:count]


@pytest.fixture
async def harness(redis_world: TaskWorld) -> AsyncIterator[Harness]:
    h = Harness("redis", redis_world.tmp_path, redis_world._url)
    h.prefix = redis_world.prefix
    yield h
    await h.close_all()


@pytest.fixture
async def nodes(harness: Harness, redis_world: TaskWorld) -> AsyncIterator[Nodes]:
    """Stops the test's nodes before `harness` closes their backends."""
    opened = Nodes(harness, redis_world)
    try:
        yield opened
    finally:
        await opened.stop_all()


def graph(task: str, *, wait: bool = False, writes: bool = False) -> TaskGraph:
    name = "write" if writes else "step"
    return TaskGraph([tool("one", name, params={"task": task, "step": "one", "wait": wait}),
                      tool("two", "step", params={"task": task, "step": "two"},
                           depends_on=["one"])])


async def test_each_task_runs_on_the_node_holding_its_chat(nodes: Nodes) -> None:
    cluster = nodes.cluster
    a = await nodes.open("node-a")
    b = await nodes.open("node-b")
    await until(lambda: len(a.backend.partitions.held()) == 2
                and len(b.backend.partitions.held()) == 2, timeout=10)
    owners = {}
    for node in (a, b):
        for chat in chats_of(node, 3):
            task = await node.engine.submit(graph(f"{node.name}/{chat}"), title=chat,
                                            provider="telegram", chat_id=chat)
            owners[task.task_id] = node
            other = b if node is a else a
            with pytest.raises(TaskFenced):  # the other node may not even store it
                await other.engine.submit(graph("x"), title="x", provider="telegram",
                                          chat_id=chat)
    for task_id, node in owners.items():
        done = await node.engine.wait(task_id)
        assert done.status is TaskStatus.COMPLETED
    for node_name, task, _step in cluster.ran:
        assert task.startswith(node_name + "/")
    assert len(cluster.ran) == 12 and cluster.overlaps == []
    # the other node sees the result (read through, not cached)
    for task_id, node in owners.items():
        other = b if node is a else a
        assert require(other.engine.store, task_id).status is TaskStatus.COMPLETED


async def test_a_dead_node_s_tasks_resume_on_the_node_that_takes_its_chats(
        nodes: Nodes) -> None:
    cluster = nodes.cluster
    a = await nodes.open("node-a")
    chat_redo, chat_ask = chats_of(a, 2)
    b = await nodes.open("node-b")
    # on A: one task mid-way through an idempotent step, one through a step that is not
    redo = await a.engine.submit(graph("redo", wait=True), title="redo",
                                 provider="telegram", chat_id=chat_redo)
    ask = await a.engine.submit(graph("ask", wait=True, writes=True), title="ask",
                                provider="telegram", chat_id=chat_ask)
    await until(lambda: cluster.active.get("redo") == {"node-a"}
                and cluster.active.get("ask") == {"node-a"}, timeout=10)

    freeze(a)  # A stops renewing: its chats go to B within a TTL or two
    both: list[str] = []

    async def watch_both() -> None:
        while True:
            both.extend(set(a.engine.running_ids()) & set(b.engine.running_ids()))
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch_both())
    await until(lambda: "redo" in cluster.active and "node-b" in cluster.active["redo"]
                or any(n == "node-b" and t == "redo" for n, t, _ in cluster.ran),
                timeout=15)
    assert a.engine.running_ids() == []  # A let go before B started
    cluster.release.set()
    await until(lambda: require(b.engine.store, redo.task_id).status is TaskStatus.COMPLETED
                and require(b.engine.store, ask.task_id).status
                is TaskStatus.WAITING_APPROVAL, timeout=10)
    watcher.cancel()
    await asyncio.gather(watcher, return_exceptions=True)
    assert both == [] and cluster.overlaps == []
    # the idempotent step ran again on B; the other one was not repeated behind anyone's back
    assert [(n, s) for n, t, s in cluster.ran if t == "redo"] == [
        ("node-a", "one"), ("node-b", "one"), ("node-b", "two")]
    assert [(n, s) for n, t, s in cluster.ran if t == "ask"] == [("node-a", "one")]
    waiting = require(b.engine.store, ask.task_id)
    assert waiting.nodes["one"].status is NodeStatus.INTERRUPTED
    assert waiting.waiting[0]["reason"] == "interrupted"
    # the user answers in the chat, which B now handles: the step runs once more, on B
    await b.engine.decide(ask.task_id, "one", "retry", by="dana")
    done = await b.engine.wait(ask.task_id)
    assert done.status is TaskStatus.COMPLETED
    assert [(n, s) for n, t, s in cluster.ran if t == "ask"][1:] == [
        ("node-b", "one"), ("node-b", "two")]
    with pytest.raises(TaskFenced):  # A, cut off, can no longer start work in those chats
        await a.engine.submit(graph("late"), title="late", provider="telegram",
                              chat_id=chat_ask)


async def test_a_node_joining_does_not_take_a_chat_whose_task_is_mid_step(
        nodes: Nodes) -> None:
    cluster = nodes.cluster
    a = await nodes.open("node-a")
    # the chat of the partition a rebalance would give away first (the highest held)
    part = max(a.backend.partitions.held())
    chat = next(c for c in chats_of(a, 20) if partition_of(f"telegram:{c}", PARTITIONS) == part)
    busy = await a.engine.submit(graph("busy", wait=True, writes=True), title="busy",
                                 provider="telegram", chat_id=chat)
    await until(lambda: cluster.active.get("busy") == {"node-a"})
    b = await nodes.open("node-b")
    # the share moves to B, but not the partition whose task is mid-step
    await until(lambda: len(a.backend.partitions.held()) == 2
                and len(b.backend.partitions.held()) == 2, timeout=10)
    assert part in a.backend.partitions.held() and part not in b.backend.partitions.held()
    cluster.release.set()
    done = await a.engine.wait(busy.task_id)
    assert done.status is TaskStatus.COMPLETED
    assert [(n, s) for n, t, s in cluster.ran if t == "busy"] == [
        ("node-a", "one"), ("node-a", "two")]  # never interrupted, never moved mid-step


async def test_an_answer_given_on_another_node_is_run_by_the_chat_s_node(
        nodes: Nodes) -> None:
    cluster = nodes.cluster
    a = await nodes.open("node-a")
    b = await nodes.open("node-b")
    await until(lambda: len(a.backend.partitions.held()) == 2
                and len(b.backend.partitions.held()) == 2, timeout=10)
    [chat] = chats_of(a, 1)

    def gated(name: str) -> TaskGraph:
        return TaskGraph([gate("ok"), tool("two", "step", params={"task": name, "step": "two"},
                                           depends_on=["ok"])])

    def status(task_id: str) -> TaskStatus:
        return require(b.engine.store, task_id).status

    first = await a.engine.submit(gated("first"), title="first", provider="telegram",
                                  chat_id=chat)
    second = await a.engine.submit(gated("second"), title="second", provider="telegram",
                                   chat_id=chat)
    await until(lambda: status(first.task_id) is TaskStatus.WAITING_APPROVAL
                and status(second.task_id) is TaskStatus.WAITING_APPROVAL, timeout=10)
    # B's dashboard answers a task of A's chat: recorded there, run here (A), never on B
    await b.engine.decide(first.task_id, "ok", "approve", by="ops")
    assert b.engine.running_ids() == []
    await until(lambda: status(first.task_id) is TaskStatus.COMPLETED, timeout=10)
    assert [(n, t) for n, t, _ in cluster.ran] == [("node-a", "first")]
    # and cancels one that waits
    cancelled = await b.engine.cancel(second.task_id, "ops")
    assert cancelled.status is TaskStatus.CANCELLED
    assert require(a.engine.store, second.task_id).status is TaskStatus.CANCELLED
    # a task running on A cannot be answered for from B: its loop holds it
    running = await a.engine.submit(graph("run", wait=True), title="run",
                                    provider="telegram", chat_id=chat)
    await until(lambda: cluster.active.get("run") == {"node-a"})
    with pytest.raises(TaskFenced, match="is running on the node that holds chat"):
        await b.engine.cancel(running.task_id, "ops")
    cluster.release.set()
    assert (await a.engine.wait(running.task_id)).status is TaskStatus.COMPLETED
