"""run_task_loop with real small executors: parallelism, injection, branches, checkpoints."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from soulflow.backends.file.tasks import FileTaskStore
from soulflow.tasks import (
    ConditionalEdge,
    NodeKind,
    NodeOutcome,
    NodeStatus,
    OutcomeStatus,
    TaskGraph,
    TaskNode,
    TaskState,
    TaskStatus,
    run_task_loop,
)
from tests.tasks.helpers import Events, Toolbox, echo, forever, stalls, tool


async def new_task(store: FileTaskStore, graph: TaskGraph, task_id: str = "t-1") -> TaskState:
    task = TaskState(task_id, "test task", graph)
    await store.add(task)
    return task


@pytest.fixture
def store(tmp_path: Path) -> FileTaskStore:
    return FileTaskStore(tmp_path / "tasks")


async def test_parallel_group_overlaps_and_results_are_injected(store: FileTaskStore) -> None:
    """b and c wait for each other to have started: a serial runner would fail them."""
    started = {"b": asyncio.Event(), "c": asyncio.Event()}

    def meeting(me: str, other: str) -> Any:
        async def run(params: dict[str, Any], abort: asyncio.Event) -> NodeOutcome:
            started[me].set()
            async with asyncio.timeout(5):
                await started[other].wait()
            return NodeOutcome.ok({"who": me, "seen": params["seed"]})
        return run

    box = Toolbox({"echo": echo, "b": meeting("b", "c"), "c": meeting("c", "b")})
    graph = TaskGraph([
        tool("a", params={"value": 7}),
        tool("b", "b", inputs={"seed": {"from": "a", "path": "value"}}),
        tool("c", "c", inputs={"seed": {"from": "a"}}),
        tool("d", inputs={"left": {"from": "b"}, "right": {"from": "c", "path": "who"}}),
    ])
    events = Events()
    task = await run_task_loop(await new_task(store, graph), store, box.executors(),
                               emit=events)
    assert task.status is TaskStatus.COMPLETED
    b, c = task.nodes["b"], task.nodes["c"]
    assert b.started_at is not None and c.started_at is not None
    assert b.finished_at is not None and c.finished_at is not None
    assert b.started_at < c.finished_at and c.started_at < b.finished_at  # overlap
    done = {e.node_id: e.payload for e in events.items if e.phase == "done" and e.node_id}
    assert done["b"]["started_at"] < done["c"]["finished_at"]
    assert done["c"]["started_at"] < done["b"]["finished_at"]
    assert task.nodes["d"].output == {"left": {"who": "b", "seen": 7},
                                      "right": "c"}
    assert box.calls[1:3] == [("b", {"seed": 7}), ("c", {"seed": {"value": 7}})] or \
        box.calls[1:3] == [("c", {"seed": {"value": 7}}), ("b", {"seed": 7})]
    assert task.result == {"d": task.nodes["d"].output}


async def test_parallelism_is_bounded(store: FileTaskStore) -> None:
    active, peak = 0, 0
    gate = asyncio.Event()

    async def work(params: dict[str, Any], abort: asyncio.Event) -> NodeOutcome:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        if active == 2:
            gate.set()
        async with asyncio.timeout(5):
            await gate.wait()
        active -= 1
        return NodeOutcome.ok(params["n"])

    box = Toolbox({"work": work})
    graph = TaskGraph([tool(f"n{i}", "work", params={"n": i}) for i in range(5)])
    task = await run_task_loop(await new_task(store, graph), store, box.executors(),
                               max_parallel=2)
    assert task.status is TaskStatus.COMPLETED
    assert peak == 2
    assert task.result == {f"n{i}": i for i in range(5)}


async def test_conditional_edge_skips_the_branch_not_taken(store: FileTaskStore) -> None:
    async def classify(params: dict[str, Any], abort: asyncio.Event) -> NodeOutcome:
        return NodeOutcome.ok({"size": 90}, route="big")

    box = Toolbox({"echo": echo, "classify": classify})
    graph = TaskGraph(
        [
            tool("classify", "classify"),
            tool("big", params={"path": "big"}),
            tool("small", params={"path": "small"}),
            tool("after_small", depends_on=["small"]),
            tool("join", inputs={"b": {"from": "big"}, "s": {"from": "small"}}),
        ],
        [ConditionalEdge("classify", {"big": "big", "small": "small"})],
    )
    events = Events()
    task = await run_task_loop(await new_task(store, graph), store, box.executors(),
                               emit=events)
    assert task.status is TaskStatus.COMPLETED
    status = {k: v.status for k, v in task.nodes.items()}
    assert status == {"classify": NodeStatus.COMPLETED, "big": NodeStatus.COMPLETED,
                      "small": NodeStatus.SKIPPED, "after_small": NodeStatus.SKIPPED,
                      "join": NodeStatus.COMPLETED}
    assert task.nodes["join"].output == {"b": {"path": "big"}, "s": None}
    assert [name for name, _ in box.calls] == ["classify", "echo", "echo"]
    [classified] = [e for e in events.items if e.phase == "done" and e.node_id == "classify"]
    assert classified.payload["skipped"] == ["small", "after_small"]


async def test_default_route(store: FileTaskStore) -> None:
    async def unsure(params: dict[str, Any], abort: asyncio.Event) -> NodeOutcome:
        return NodeOutcome.ok(None, route="maybe")

    box = Toolbox({"echo": echo, "unsure": unsure})
    graph = TaskGraph([tool("q", "unsure"), tool("yes"), tool("ask")],
                      [ConditionalEdge("q", {"yes": "yes"}, default="ask")])
    task = await run_task_loop(await new_task(store, graph), store, box.executors())
    assert task.nodes["yes"].status is NodeStatus.SKIPPED
    assert task.nodes["ask"].status is NodeStatus.COMPLETED


async def test_checkpoint_before_and_after_every_node(store: FileTaskStore) -> None:
    """At each event the file on disk already shows the step the event reports."""
    seen: list[tuple[str, str, str]] = []

    async def check_disk(event: Any) -> None:
        on_disk = json.loads(store.path.read_text())["tasks"]["t-1"]
        if event.node_id:
            seen.append((event.phase, event.node_id, on_disk["nodes"][event.node_id]["status"]))
        else:
            seen.append((event.phase, "task", on_disk["status"]))

    box = Toolbox({"echo": echo})
    graph = TaskGraph([tool("a"), tool("b", depends_on=["a"]), tool("c", depends_on=["b"])])
    await run_task_loop(await new_task(store, graph), store, box.executors(),
                        emit=check_disk, max_parallel=1)
    assert seen == [
        ("assign", "a", "running"), ("done", "a", "completed"),
        ("assign", "b", "running"), ("done", "b", "completed"),
        ("assign", "c", "running"), ("done", "c", "completed"),
        ("done", "task", "completed"),
    ]


async def test_a_failed_node_fails_the_task_and_starts_nothing_more(store: FileTaskStore) -> None:
    async def boom(params: dict[str, Any], abort: asyncio.Event) -> NodeOutcome:
        raise RuntimeError("disk on fire")

    box = Toolbox({"echo": echo, "boom": boom})
    graph = TaskGraph([tool("a", "boom"), tool("b", depends_on=["a"]), tool("c")])
    task = await run_task_loop(await new_task(store, graph), store, box.executors(),
                               max_parallel=1)
    assert task.status is TaskStatus.FAILED
    assert task.error == "a: RuntimeError: disk on fire"
    assert task.nodes["b"].status is NodeStatus.PENDING
    assert task.nodes["c"].status is NodeStatus.PENDING


async def test_output_schema_is_enforced(store: FileTaskStore) -> None:
    box = Toolbox({"echo": echo})
    graph = TaskGraph([tool("a", params={"n": "five"},
                            output_schema={"type": "object",
                                           "properties": {"n": {"type": "integer"}}})])
    task = await run_task_loop(await new_task(store, graph), store, box.executors())
    assert task.status is TaskStatus.FAILED
    assert "does not match its schema" in task.nodes["a"].error


async def test_agent_node_gets_goal_tools_inputs_and_max_turns(store: FileTaskStore) -> None:
    received: list[tuple[str, list[str], dict[str, Any]]] = []

    async def agent(goal: str, allowed: list[str], inputs: dict[str, Any],
                    abort: asyncio.Event) -> NodeOutcome:
        received.append((goal, allowed, inputs))
        if goal == "loop":
            return NodeOutcome(OutcomeStatus.MAX_TURNS_REACHED, summary="15 turns")
        return NodeOutcome.ok(f"{goal}!")

    box = Toolbox({"echo": echo}, agent=agent)
    graph = TaskGraph([
        TaskNode(id="r", kind=NodeKind.AGENT, goal="research", tools=["web_fetch"]),
        TaskNode(id="w", kind=NodeKind.AGENT, goal="loop", tools=[],
                 inputs={"notes": {"from": "r"}}),
    ])
    task = await run_task_loop(await new_task(store, graph), store, box.executors())
    assert received == [("research", ["web_fetch"], {}), ("loop", [], {"notes": "research!"})]
    assert task.status is TaskStatus.MAX_TURNS_REACHED
    assert task.nodes["w"].status is NodeStatus.MAX_TURNS_REACHED


async def test_cancel_cancels_a_running_group(store: FileTaskStore) -> None:
    cancelled: list[str] = []
    box = Toolbox({"echo": echo, "forever": forever(cancelled, "name")})
    graph = TaskGraph([tool(n, "forever", params={"name": n}) for n in ("x", "y", "z")]
                      + [tool("after", depends_on=["x", "y", "z"])])
    events, abort = Events(), asyncio.Event()
    loop = asyncio.create_task(run_task_loop(await new_task(store, graph), store,
                                             box.executors(), emit=events, abort=abort))
    await events.wait_for(lambda: events.phases().count("assign") == 3)
    abort.set()
    task = await asyncio.wait_for(loop, 5)
    assert task.status is TaskStatus.CANCELLED
    assert sorted(cancelled) == ["x", "y", "z"]
    assert {s.status for s in task.nodes.values()} == {NodeStatus.CANCELLED}
    assert events.items[-1].payload == {"status": "cancelled"}
    assert FileTaskStore(store.directory).get("t-1").status is TaskStatus.CANCELLED  # type: ignore[union-attr]


async def test_shutdown_leaves_running_nodes_for_recovery(store: FileTaskStore) -> None:
    started = asyncio.Event()
    box = Toolbox({"slow": stalls(started), "echo": echo}, idempotent={"slow"})
    graph = TaskGraph([tool("a", "slow"), tool("b", depends_on=["a"])])
    loop = asyncio.create_task(run_task_loop(await new_task(store, graph), store,
                                             box.executors()))
    await asyncio.wait_for(started.wait(), 5)
    loop.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loop
    reloaded = FileTaskStore(store.directory)
    task = reloaded.get("t-1")
    assert task is not None and task.nodes["a"].status is NodeStatus.RUNNING
    box.tools["slow"] = echo
    events = Events()
    await run_task_loop(task, reloaded, box.executors(), emit=events)
    assert task.status is TaskStatus.COMPLETED
    assert task.nodes["a"].attempts == 2
    assert events.items[0].phase == "progress" and "idempotent" in events.items[0].summary
