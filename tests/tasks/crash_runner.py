"""A small task runner for the crash tests: runs one graph and can SIGKILL itself on cue.

    python -m tests.tasks.crash_runner WORKSPACE [--kill after:NODE|inside:NODE|before:NODE]
                                                 [--decide NODE:CHOICE ...] [--gate]

Every node's side effect appends its name to WORKSPACE/effects.txt, so the test can count how
often each one happened. `after:X` dies right after X's completion was checkpointed (a node
boundary), `inside:X` just after X's side effect and before it returns (mid-node), `before:X`
mid-node before the side effect. Prints the task's final state as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

from soulflow.backends.file.tasks import FileTaskStore
from soulflow.backends.file.workflow import FileWorkflowLog
from soulflow.events.workflow import WorkflowEventService
from soulflow.tasks import (
    NodeCall,
    NodeExecutors,
    NodeKind,
    NodeOutcome,
    TaskEngine,
    TaskEvent,
    TaskGraph,
    TaskNode,
)

TASK_ID = "t-crash"
IDEMPOTENT = {"put"}  # `put` appends only if its line is missing; `append` always appends


def graph(gate: bool) -> TaskGraph:
    def node(node_id: str, tool: str, **kw: Any) -> TaskNode:
        return TaskNode(id=node_id, kind=NodeKind.TOOL, tool=tool, params={"node": node_id},
                        **kw)

    nodes = [
        node("a", "append"),
        node("b", "append", inputs={"after": {"from": "a", "path": "node"}}),
        node("c", "put", depends_on=["a"]),
        node("d", "append", inputs={"b": {"from": "b"}, "c": {"from": "c"}}),
    ]
    if gate:  # d waits for an approval given after b and c
        nodes.append(TaskNode(id="ok", kind=NodeKind.APPROVAL, prompt="Run d?",
                              depends_on=["b", "c"]))
        nodes[3].depends_on = ["ok"]
    return TaskGraph(nodes)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class Effects:
    def __init__(self, workspace: Path, kill: str) -> None:
        self.path = workspace / "effects.txt"
        self.kill = kill

    def _write(self, node: str) -> None:
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(node + "\n")

    def _lines(self) -> list[str]:
        try:
            return self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []

    async def run_tool(self, name: str, params: dict[str, Any],
                       abort: asyncio.Event, *, call: NodeCall) -> NodeOutcome:
        node = params["node"]
        if self.kill == f"before:{node}":
            die()
        if name == "append" or node not in self._lines():
            self._write(node)
        if self.kill == f"inside:{node}":
            die()
        return NodeOutcome.ok({"node": node, "inputs": {k: v for k, v in params.items()
                                                        if k != "node"}})

    async def run_agent(self, goal: str, allowed: list[str], inputs: dict[str, Any],
                        abort: asyncio.Event, *, call: NodeCall) -> NodeOutcome:
        raise AssertionError("no agent nodes in this graph")


async def main(args: argparse.Namespace) -> None:
    workspace = Path(args.workspace)
    effects = Effects(workspace, args.kill or "")
    store = FileTaskStore(workspace / "runtime" / "tasks")
    events = WorkflowEventService(FileWorkflowLog(workspace / "runtime" / "events"),
                                  workspace=workspace)
    events.bind_task_store(store)

    async def emit(event: TaskEvent) -> None:
        await events.emit_task_event(event)
        if event.phase == "done" and args.kill == f"after:{event.node_id}":
            die()

    executors = NodeExecutors(effects.run_agent, effects.run_tool, lambda t: t in IDEMPOTENT)
    engine = TaskEngine(store, executors, tool_names={"append", "put"}, emit=emit,
                        max_parallel=2)
    if store.get(TASK_ID) is None:
        await engine.submit(graph(args.gate), title="crash test", task_id=TASK_ID)
    await engine.start()
    for decision in args.decide:
        node_id, choice = decision.split(":", 1)
        await engine.decide(TASK_ID, node_id, choice, by="test")
    task = await engine.wait(TASK_ID)
    await engine.stop()
    await events.close()
    print(json.dumps({"status": task.status.value, "waiting": task.waiting,
                      "nodes": {k: v.status.value for k, v in task.nodes.items()}}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("workspace")
    parser.add_argument("--kill", default="")
    parser.add_argument("--decide", action="append", default=[])
    parser.add_argument("--gate", action="store_true", help="an approval gate before d")
    asyncio.run(main(parser.parse_args()))
