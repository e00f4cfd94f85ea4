"""What the task engine needs from the rest of the daemon, and what it tells it.

Node executors are injected callables, so the engine runs with real small functions in tests
and (once wired, see docs/tasks.md) with AgentDomain / ToolRegistry; `TaskEvent`s go to an
`emit` callback (the WorkflowEventService's `emit_task_event` in the daemon).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from soulflow.tasks.model import NodeKind, NodeOutcome, TaskNode, TaskState


@dataclass(frozen=True, slots=True)
class NodeCall:
    """Which task and node an executor call is for, so the daemon's executors can run it in
    the task's chat (approvals bound to its requester, the chat's secret scope) and find the
    agent run an earlier attempt of the same node left behind.

    `approval` is the node's `NodeState.approval` when it runs again after waiting for a
    person: what it waited for plus `decision` (`approve` / `deny`) and `by`.
    """

    task: TaskState
    node: TaskNode
    attempt: int
    approval: dict[str, Any] | None = None


class AgentRunFn(Protocol):
    """Runs an agent for one node: its own goal, only the allowed tools, the injected inputs."""

    def __call__(self, goal: str, allowed_tools: list[str], inputs: dict[str, Any],
                 abort: asyncio.Event, *, call: NodeCall) -> Awaitable[NodeOutcome]: ...


class ToolRunFn(Protocol):
    """Calls one tool with the node's params (inputs merged over them)."""

    def __call__(self, name: str, params: dict[str, Any],
                 abort: asyncio.Event, *, call: NodeCall) -> Awaitable[NodeOutcome]: ...


@dataclass(slots=True)
class NodeExecutors:
    """What the engine needs from the rest of the daemon, injected so it is testable alone."""

    run_agent: AgentRunFn
    run_tool: ToolRunFn
    tool_is_idempotent: Callable[[str], bool] = field(default=lambda name: False)

    def idempotent(self, node: TaskNode) -> bool:
        if node.kind is NodeKind.TOOL:
            return self.tool_is_idempotent(node.tool)
        if node.kind is NodeKind.AGENT:
            return all(self.tool_is_idempotent(t) for t in node.tools)
        return True  # an approval gate does nothing by itself


@dataclass(slots=True)
class TaskEvent:
    """A step of the task's story, handed to `emit` after the matching checkpoint.

    `key` is unique per step and attempt, so a replayed step has the same event id (deduped).
    Phases: assign, progress, blocked, approval, done.
    """

    task: TaskState
    phase: str
    summary: str
    key: str
    node_id: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)


EmitFn = Callable[[TaskEvent], Awaitable[None]]
