"""Small real executors and an event recorder for the task engine tests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from soulflow.tasks import (
    NodeCall,
    NodeExecutors,
    NodeKind,
    NodeOutcome,
    NodeStatus,
    TaskEvent,
    TaskGraph,
    TaskNode,
    TaskState,
    TaskStatus,
)

ToolFn = Callable[[dict[str, Any], asyncio.Event], Awaitable[NodeOutcome]]
AgentFn = Callable[[str, list[str], dict[str, Any], asyncio.Event], Awaitable[NodeOutcome]]



def tool(node_id: str, name: str = "echo", **kw: Any) -> TaskNode:
    """A tool step (the Toolbox's `echo` unless named)."""
    return TaskNode(id=node_id, kind=NodeKind.TOOL, tool=name, **kw)


def gate(node_id: str, prompt: str = "Send the email?", **kw: Any) -> TaskNode:
    """An approval gate."""
    return TaskNode(id=node_id, kind=NodeKind.APPROVAL, prompt=prompt, **kw)

@dataclass
class Toolbox:
    """Named async tool functions; records every call with its params."""

    tools: dict[str, ToolFn] = field(default_factory=dict)
    idempotent: set[str] = field(default_factory=set)
    agent: AgentFn | None = None
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    async def run_tool(self, name: str, params: dict[str, Any],
                       abort: asyncio.Event, *, call: NodeCall) -> NodeOutcome:
        self.calls.append((name, params))
        return await self.tools[name](params, abort)

    async def run_agent(self, goal: str, allowed: list[str], inputs: dict[str, Any],
                        abort: asyncio.Event, *, call: NodeCall) -> NodeOutcome:
        self.calls.append((f"agent:{goal}", inputs))
        if self.agent is None:
            return NodeOutcome.ok({"goal": goal, "inputs": inputs}, summary=f"did {goal}")
        return await self.agent(goal, allowed, inputs, abort)

    def executors(self) -> NodeExecutors:
        return NodeExecutors(self.run_agent, self.run_tool, lambda n: n in self.idempotent)


async def echo(params: dict[str, Any], abort: asyncio.Event) -> NodeOutcome:
    """Returns its params as its output."""
    return NodeOutcome.ok(dict(params), summary="echoed")


def waiting_task(task_id: str, chat_id: str, *after: TaskNode) -> TaskState:
    """"Mail the vendors", stopped at its approval gate `ok` (asked by "someone" in the local
    chat `chat_id`) after its `draft` step; `after` adds steps behind the gate."""
    graph = TaskGraph([
        TaskNode(id="draft", kind=NodeKind.TOOL, tool="read_file", params={"path": "x"}),
        TaskNode(id="ok", kind=NodeKind.APPROVAL, prompt="Send the mail?", depends_on=["draft"]),
        *after,
    ])
    task = TaskState(task_id, "Mail the vendors", graph, status=TaskStatus.WAITING_APPROVAL,
                     provider="local", chat_id=chat_id, requested_by="someone")
    task.nodes["draft"].status = NodeStatus.COMPLETED
    task.nodes["ok"].status = NodeStatus.WAITING_APPROVAL
    task.waiting = [{"node_id": "ok", "reason": "approval", "prompt": "Send the mail?"}]
    return task


def forever(cancelled: list[str], key: str) -> ToolFn:
    """A tool that never finishes; when its step is cancelled it notes `params[key]` in
    `cancelled`, so a test sees which running steps a cancel reached."""

    async def run(params: dict[str, Any], abort: asyncio.Event) -> NodeOutcome:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(params[key])
            raise
        return NodeOutcome.ok()

    return run


def stalls(started: asyncio.Event) -> ToolFn:
    """A tool that sets `started` and never finishes: the step is still running when the test
    stops the loop or the engine."""

    async def run(params: dict[str, Any], abort: asyncio.Event) -> NodeOutcome:
        started.set()
        await asyncio.Event().wait()
        return NodeOutcome.ok()

    return run


@dataclass
class Events:
    """Collects the runner's events; `wait_for` polls a condition with a timeout."""

    items: list[TaskEvent] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, event: TaskEvent) -> None:
        self.items.append(event)
        self.changed.set()

    def phases(self, node_id: str | None = None) -> list[str]:
        return [e.phase for e in self.items if node_id is None or e.node_id == node_id]

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while not predicate():
                self.changed.clear()
                await self.changed.wait()
