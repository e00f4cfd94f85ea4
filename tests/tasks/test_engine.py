"""TaskEngine: submit, decisions while other branches run, user cancel, stop and resume."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from soulflow.backends.file.tasks import FileTaskStore
from soulflow.tasks import (
    Choice,
    GraphValidationError,
    NodeOutcome,
    NodeStatus,
    TaskDecisionError,
    TaskEngine,
    TaskGraph,
    TaskStatus,
)
from soulflow.tasks.answers import decide, require
from tests.tasks.helpers import Events, Toolbox, echo, forever, gate, stalls, tool


async def test_invalid_graph_is_refused_before_anything_is_stored(tmp_path: Path) -> None:
    store = FileTaskStore(tmp_path)
    engine = TaskEngine(store, Toolbox({"echo": echo}).executors(), tool_names={"echo"})
    with pytest.raises(GraphValidationError, match="unknown tool 'nope'"):
        await engine.submit(TaskGraph([tool("a", "nope")]), title="x")
    assert store.list() == [] and not store.path.exists()


async def test_a_decision_applies_while_another_branch_still_runs(tmp_path: Path) -> None:
    release = asyncio.Event()

    async def long(params: dict[str, Any], abort: asyncio.Event) -> NodeOutcome:
        async with asyncio.timeout(5):
            await release.wait()
        return NodeOutcome.ok("long done")

    events = Events()
    engine = TaskEngine(FileTaskStore(tmp_path), Toolbox({"echo": echo, "long": long}).executors(),
                        emit=events)
    task = await engine.submit(TaskGraph([tool("long", "long"), gate("ok"),
                                          tool("send", depends_on=["ok"])]), title="t")
    await events.wait_for(lambda: ("blocked", "ok") in [(e.phase, e.node_id)
                                                        for e in events.items])
    assert task.status is TaskStatus.RUNNING  # `long` still runs
    await engine.decide(task.task_id, "ok", Choice.APPROVE, by="dana")
    # `send` runs now, not when `long` finishes
    await events.wait_for(lambda: ("done", "send") in [(e.phase, e.node_id)
                                                       for e in events.items])
    assert task.nodes["long"].status is NodeStatus.RUNNING
    release.set()
    await engine.wait(task.task_id)
    assert task.status is TaskStatus.COMPLETED
    await engine.stop()


async def test_cancel_running_and_waiting_tasks(tmp_path: Path) -> None:
    cancelled: list[str] = []
    events = Events()
    store = FileTaskStore(tmp_path)
    box = Toolbox({"echo": echo, "forever": forever(cancelled, "n")})
    engine = TaskEngine(store, box.executors(), emit=events)
    running = await engine.submit(TaskGraph([tool("x", "forever", params={"n": "x"}),
                                             tool("y", "forever", params={"n": "y"})]),
                                  title="group")
    waiting = await engine.submit(TaskGraph([gate("ok"), tool("z", depends_on=["ok"])]),
                                  title="gated")
    await events.wait_for(lambda: events.phases().count("assign") == 2)
    await engine.wait(waiting.task_id)
    assert waiting.status is TaskStatus.WAITING_APPROVAL
    await engine.cancel(running.task_id, by="erin")
    await engine.cancel(waiting.task_id, by="erin")
    assert running.status is TaskStatus.CANCELLED and sorted(cancelled) == ["x", "y"]
    assert waiting.status is TaskStatus.CANCELLED
    assert engine.running_ids() == []
    with pytest.raises(TaskDecisionError, match="already cancelled"):
        await engine.cancel(running.task_id)
    reloaded = FileTaskStore(tmp_path)
    assert {t.status for t in reloaded.list()} == {TaskStatus.CANCELLED}


async def test_stop_then_start_resumes_running_tasks_only(tmp_path: Path) -> None:
    started = asyncio.Event()
    store = FileTaskStore(tmp_path)
    box = Toolbox({"echo": echo, "slow": stalls(started)}, idempotent={"slow"})
    engine = TaskEngine(store, box.executors())
    running = await engine.submit(TaskGraph([tool("a", "slow"), tool("b", depends_on=["a"])]),
                                  title="r", task_id="t-run")
    gated = await engine.submit(TaskGraph([gate("ok")]), title="g", task_id="t-gate")
    await asyncio.wait_for(started.wait(), 5)
    await engine.wait(gated.task_id)
    await engine.stop()
    assert running.nodes["a"].status is NodeStatus.RUNNING

    box.tools["slow"] = echo  # the "new process" has a quick `slow`
    store2 = FileTaskStore(tmp_path)
    engine2 = TaskEngine(store2, box.executors())
    assert await engine2.start() == ["t-run"]
    assert (await engine2.wait("t-run")).status is TaskStatus.COMPLETED
    assert require(store2, "t-gate").status is TaskStatus.WAITING_APPROVAL
    await engine2.decide("t-gate", "ok", Choice.APPROVE)
    assert (await engine2.wait("t-gate")).status is TaskStatus.COMPLETED
    await engine2.stop()


async def test_an_answer_recorded_before_a_crash_is_acted_on_at_boot(tmp_path: Path) -> None:
    store = FileTaskStore(tmp_path)
    engine = TaskEngine(store, Toolbox({"echo": echo}).executors())
    await engine.submit(TaskGraph([gate("ok"), tool("send", depends_on=["ok"])]), title="g",
                        task_id="t-g")
    await engine.wait("t-g")
    await engine.stop()
    await decide(store, "t-g", "ok", Choice.APPROVE, by="fay")  # ...and the process dies here

    store2 = FileTaskStore(tmp_path)
    engine2 = TaskEngine(store2, Toolbox({"echo": echo}).executors())
    assert await engine2.start() == ["t-g"]
    task = await engine2.wait("t-g")
    assert task.status is TaskStatus.COMPLETED
    assert task.nodes["ok"].output == {"approved": True, "by": "fay"}
    await engine2.stop()
