"""Approval gates and interrupted nodes: the task waits, survives a reload, continues on answer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from soulflow.backends.file.tasks import FileTaskStore
from soulflow.tasks import (
    Choice,
    ConditionalEdge,
    NodeOutcome,
    NodeStatus,
    TaskDecisionError,
    TaskGraph,
    TaskState,
    TaskStatus,
    run_task_loop,
)
from soulflow.tasks.answers import decide
from tests.tasks.helpers import Events, Toolbox, echo, gate, tool


def email_graph() -> TaskGraph:
    return TaskGraph([
        tool("draft", params={"body": "hello vendors"}),
        gate("ok", depends_on=["draft"]),
        tool("send", "send", inputs={"draft": {"from": "draft", "path": "body"}},
             depends_on=["ok"]),
    ])


async def sender(box_calls: list[dict[str, Any]]) -> Any:
    async def send(params: dict[str, Any], abort: asyncio.Event) -> NodeOutcome:
        box_calls.append(params)
        return NodeOutcome.ok("sent")
    return send


async def test_gate_waits_survives_reload_and_continues_on_approval(tmp_path: Path) -> None:
    sent: list[dict[str, Any]] = []
    store = FileTaskStore(tmp_path)
    task = TaskState("t-mail", "mail", email_graph())
    await store.add(task)
    events = Events()
    box = Toolbox({"echo": echo, "send": await sender(sent)})
    await run_task_loop(task, store, box.executors(), emit=events)
    assert task.status is TaskStatus.WAITING_APPROVAL
    assert task.waiting == [{"node_id": "ok", "reason": "approval", "prompt": "Send the email?"}]
    assert sent == []
    assert [(e.phase, e.node_id) for e in events.items][-2:] == [("blocked", "ok"),
                                                               ("blocked", None)]

    # the daemon restarts: everything comes back from store.json
    reloaded = FileTaskStore(tmp_path)
    again = reloaded.get("t-mail")
    assert again is not None and again.status is TaskStatus.WAITING_APPROVAL
    assert again.nodes["ok"].status is NodeStatus.WAITING_APPROVAL
    await run_task_loop(again, reloaded, box.executors())  # nothing decided: still waiting
    assert again.status is TaskStatus.WAITING_APPROVAL and sent == []

    with pytest.raises(TaskDecisionError, match="takes one of: approve, deny"):
        await decide(reloaded, "t-mail", "ok", Choice.RETRY)
    await decide(reloaded, "t-mail", "ok", "approve", by="alice")
    # the answer is on disk before anything acts on it
    assert FileTaskStore(tmp_path).get("t-mail").nodes["ok"].choice == "approve"  # type: ignore[union-attr]
    events = Events()
    await run_task_loop(again, reloaded, box.executors(), emit=events)
    assert again.status is TaskStatus.COMPLETED
    assert sent == [{"draft": "hello vendors"}]
    assert again.nodes["ok"].output == {"approved": True, "by": "alice"}
    assert events.items[0].phase == "approval" and events.items[0].payload["by"] == "alice"


async def test_denied_gate_cancels_the_task(tmp_path: Path) -> None:
    sent: list[dict[str, Any]] = []
    store = FileTaskStore(tmp_path)
    task = TaskState("t-d", "mail", email_graph())
    await store.add(task)
    box = Toolbox({"echo": echo, "send": await sender(sent)})
    await run_task_loop(task, store, box.executors())
    await decide(store, "t-d", "ok", Choice.DENY, by="bob")
    await run_task_loop(task, store, box.executors())
    assert task.status is TaskStatus.CANCELLED
    assert task.error == "ok: denied by bob"
    assert sent == []
    with pytest.raises(TaskDecisionError, match="already cancelled"):
        await decide(store, "t-d", "ok", Choice.APPROVE)


async def test_gate_with_conditional_edge_routes_a_denial(tmp_path: Path) -> None:
    store = FileTaskStore(tmp_path)
    graph = TaskGraph([gate("ok"), tool("send"), tool("apologise")],
                      [ConditionalEdge("ok", {"approved": "send", "denied": "apologise"})])
    task = TaskState("t-r", "routes", graph)
    await store.add(task)
    box = Toolbox({"echo": echo})
    await run_task_loop(task, store, box.executors())
    await decide(store, "t-r", "ok", Choice.DENY, by="bob")
    await run_task_loop(task, store, box.executors())
    assert task.status is TaskStatus.COMPLETED
    assert task.nodes["send"].status is NodeStatus.SKIPPED
    assert task.nodes["apologise"].status is NodeStatus.COMPLETED


async def test_other_branches_run_while_a_gate_waits(tmp_path: Path) -> None:
    store = FileTaskStore(tmp_path)
    graph = TaskGraph([gate("ok"), tool("send", depends_on=["ok"]), tool("research")])
    task = TaskState("t-b", "branches", graph)
    await store.add(task)
    await run_task_loop(task, store, Toolbox({"echo": echo}).executors())
    assert task.status is TaskStatus.WAITING_APPROVAL
    assert task.nodes["research"].status is NodeStatus.COMPLETED
    assert task.nodes["send"].status is NodeStatus.PENDING


@pytest.mark.parametrize("choice, expected", [
    (Choice.RETRY, (TaskStatus.COMPLETED, NodeStatus.COMPLETED, 2)),
    (Choice.MARK_DONE, (TaskStatus.COMPLETED, NodeStatus.COMPLETED, 1)),
    (Choice.DENY, (TaskStatus.CANCELLED, NodeStatus.FAILED, 1)),
])
async def test_interrupted_node_waits_for_the_user(tmp_path: Path, choice: Choice,
                                                   expected: tuple[Any, ...]) -> None:
    """A non-idempotent node found `running` at boot is not re-run behind the user's back."""
    store = FileTaskStore(tmp_path)
    task = TaskState("t-i", "interrupted", TaskGraph([tool("pay", "pay"),
                                                      tool("receipt", depends_on=["pay"])]))
    task.nodes["pay"].status, task.nodes["pay"].attempts = NodeStatus.RUNNING, 1
    await store.add(task)
    paid: list[int] = []

    async def pay(params: dict[str, Any], abort: asyncio.Event) -> NodeOutcome:
        paid.append(1)
        return NodeOutcome.ok("paid")

    box = Toolbox({"pay": pay, "echo": echo})
    events = Events()
    await run_task_loop(task, store, box.executors(), emit=events)
    assert task.status is TaskStatus.WAITING_APPROVAL
    assert task.nodes["pay"].status is NodeStatus.INTERRUPTED
    assert task.waiting[0]["reason"] == "interrupted"
    assert paid == []
    assert events.items[0].phase == "blocked" and "interrupted" in events.items[0].summary
    await decide(store, "t-i", "pay", choice, by="carol")
    await run_task_loop(task, store, box.executors())
    status, pay_status, attempts = expected
    assert (task.status, task.nodes["pay"].status) == (status, pay_status)
    assert task.nodes["pay"].attempts == attempts
    assert len(paid) == (1 if choice is Choice.RETRY else 0)
