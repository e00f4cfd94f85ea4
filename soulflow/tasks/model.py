"""The task model: a graph of nodes, and the state of one task running that graph.

A task is multi-step work ("research five vendors, compare them, draft the email, send it after I
approve") that may run for hours and must survive a restart, so every type here converts to and
from plain JSON (`to_dict` / `from_dict`): the TaskStore checkpoints `TaskState` after every node.

Graph semantics, kept deliberately small so a planner (a model) can write valid graphs:

- a node runs once every node it depends on is settled; dependencies are `depends_on` plus every
  node named by an input reference `{"from": "node_id"}` plus the source of a conditional edge
  that targets it;
- nodes whose dependencies are met run concurrently (bounded): that is what "dependency groups"
  are; `execution_groups` shows them as levels;
- a conditional edge lets the source node's result (`NodeOutcome.route`) pick one target; the
  targets not taken are skipped, and so is every node all of whose dependencies were skipped;
- a node with some (not all) dependencies skipped still runs: its inputs from skipped nodes are
  `None`, which is how branches join again.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from soulflow.errors import SoulFlowError


class NodeKind(StrEnum):
    """What a node does: an agent run (own goal and tool allow-list), one tool call, or a gate."""

    AGENT = "agent"
    TOOL = "tool"
    APPROVAL = "approval"


class TaskStatus(StrEnum):
    """Status of a whole task (the names users and the dashboard see)."""

    RUNNING = "running"
    WAITING_APPROVAL = "waiting_approval"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    MAX_TURNS_REACHED = "max_turns_reached"

    @property
    def finished(self) -> bool:
        return self not in (TaskStatus.RUNNING, TaskStatus.WAITING_APPROVAL)


class NodeStatus(StrEnum):
    """Status of one node. `interrupted`: it was mid-flight when the process died and is not
    safe to re-run on its own, so the task waits for the user to decide."""

    PENDING = "pending"
    RUNNING = "running"
    WAITING_APPROVAL = "waiting_approval"
    INTERRUPTED = "interrupted"
    COMPLETED = "completed"
    SKIPPED = "skipped"
    FAILED = "failed"
    CANCELLED = "cancelled"
    MAX_TURNS_REACHED = "max_turns_reached"

    @property
    def settled(self) -> bool:
        """Dependents may look at this node: it will not run (again) by itself."""
        return self in (NodeStatus.COMPLETED, NodeStatus.SKIPPED)


class OutcomeStatus(StrEnum):
    """How a node's execution ended; `needs_approval`: a tool call inside the node needs a
    person's yes first, so the node waits (`waiting_approval`) and runs again once decided."""

    COMPLETED = "completed"
    FAILED = "failed"
    MAX_TURNS_REACHED = "max_turns_reached"
    NEEDS_APPROVAL = "needs_approval"


class Choice(StrEnum):
    """A user's answer to a waiting node.

    Approval gate: `approve` or `deny`. Interrupted node: `retry` (run it again), `mark_done`
    (its side effect happened, carry on without its output) or `deny` (stop the task).
    """

    APPROVE = "approve"
    DENY = "deny"
    RETRY = "retry"
    MARK_DONE = "mark_done"


def now() -> float:
    return time.time()


@dataclass(slots=True)
class TaskNode:
    """One step. `inputs` maps names to literals or references `{"from": id, "path": "a.b"}`.

    Agent nodes use `goal` and `tools` (the allow-list); tool nodes `tool` and `params` (inputs
    override params of the same name); approval gates `prompt`. `output_schema`, when set, is a
    JSON schema the node's output must satisfy, or the node fails.
    """

    id: str
    kind: NodeKind
    title: str = ""
    goal: str = ""
    tools: list[str] = field(default_factory=list)
    tool: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)
    depends_on: list[str] = field(default_factory=list)
    prompt: str = ""
    output_schema: dict[str, Any] | None = None

    def references(self) -> list[str]:
        """Node ids named by `{"from": ...}` inputs (each is also a dependency)."""
        found: list[str] = []
        for value in self.inputs.values():
            if is_reference(value):
                found.append(str(value["from"]))
        return found

    def label(self) -> str:
        return self.title or self.goal or self.tool or self.prompt or self.id

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "kind": self.kind.value}
        for name in ("title", "goal", "tool", "prompt"):
            if value := getattr(self, name):
                data[name] = value
        for name in ("tools", "params", "inputs", "depends_on"):
            if value := getattr(self, name):
                data[name] = value
        if self.output_schema is not None:
            data["output_schema"] = self.output_schema
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskNode:
        return cls(
            id=str(data["id"]),
            kind=NodeKind(data["kind"]),
            title=str(data.get("title", "")),
            goal=str(data.get("goal", "")),
            tools=[str(t) for t in data.get("tools", [])],
            tool=str(data.get("tool", "")),
            params=dict(data.get("params", {})),
            inputs=dict(data.get("inputs", {})),
            depends_on=[str(d) for d in data.get("depends_on", [])],
            prompt=str(data.get("prompt", "")),
            output_schema=data.get("output_schema"),
        )


def is_reference(value: Any) -> bool:
    return isinstance(value, dict) and "from" in value and set(value) <= {"from", "path"}


@dataclass(slots=True)
class ConditionalEdge:
    """After `source` completes, its outcome's `route` picks `routes[route]` (else `default`).

    Every target in `routes` (and `default`) not picked is skipped. An approval gate used as a
    source routes `approved` / `denied` instead of stopping the task on a denial.
    """

    source: str
    routes: dict[str, str]
    default: str | None = None

    def targets(self) -> list[str]:
        found = list(dict.fromkeys(self.routes.values()))
        if self.default is not None and self.default not in found:
            found.append(self.default)
        return found

    def pick(self, route: str | None) -> str | None:
        if route is not None and route in self.routes:
            return self.routes[route]
        return self.default

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"source": self.source, "routes": dict(self.routes)}
        if self.default is not None:
            data["default"] = self.default
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConditionalEdge:
        default = data.get("default")
        return cls(source=str(data["source"]),
                   routes={str(k): str(v) for k, v in dict(data.get("routes", {})).items()},
                   default=None if default is None else str(default))


@dataclass(slots=True)
class TaskGraph:
    nodes: list[TaskNode]
    conditions: list[ConditionalEdge] = field(default_factory=list)

    def node(self, node_id: str) -> TaskNode:
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    def dependencies(self) -> dict[str, list[str]]:
        """Every node's dependencies: explicit, by input reference, and by conditional edge."""
        deps: dict[str, list[str]] = {n.id: [] for n in self.nodes}
        for node in self.nodes:
            deps[node.id] = list(dict.fromkeys([*node.depends_on, *node.references()]))
        for edge in self.conditions:
            for target in edge.targets():
                if target in deps and edge.source not in deps[target]:
                    deps[target].append(edge.source)
        return deps

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"nodes": [n.to_dict() for n in self.nodes]}
        if self.conditions:
            data["conditions"] = [c.to_dict() for c in self.conditions]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskGraph:
        return cls(nodes=[TaskNode.from_dict(n) for n in data.get("nodes", [])],
                   conditions=[ConditionalEdge.from_dict(c) for c in data.get("conditions", [])])


@dataclass(slots=True)
class NodeOutcome:
    """What an executor returns. `route` feeds conditional edges; `output` must be JSON-able."""

    status: OutcomeStatus = OutcomeStatus.COMPLETED
    output: Any = None
    summary: str = ""
    route: str | None = None
    error: str = ""

    @classmethod
    def ok(cls, output: Any = None, *, summary: str = "", route: str | None = None) -> NodeOutcome:
        return cls(OutcomeStatus.COMPLETED, output, summary, route)

    @classmethod
    def failed(cls, error: str) -> NodeOutcome:
        return cls(OutcomeStatus.FAILED, error=error, summary=error)

    @classmethod
    def needs_approval(cls, reason: str, details: dict[str, Any] | None = None) -> NodeOutcome:
        """The node must wait for a person: `reason` is shown to them; `details` (e.g. the
        agent run and its approval id) come back to the executor in `NodeCall.approval`."""
        return cls(OutcomeStatus.NEEDS_APPROVAL, output=details or {}, summary=reason)


@dataclass(slots=True)
class NodeState:
    """The checkpointed state of one node; `choice` is the user's pending answer, if any.

    `approval` is set while a tool or agent node waits for a person (what it waits for, from
    `NodeOutcome.needs_approval`); the answer is added as `decision` and handed to the
    executor when the node runs again.
    """

    status: NodeStatus = NodeStatus.PENDING
    output: Any = None
    summary: str = ""
    route: str | None = None
    error: str = ""
    attempts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    choice: str | None = None
    decided_by: str = ""
    approval: dict[str, Any] | None = None

    def waiting_entry(self, node: TaskNode) -> dict[str, Any] | None:
        """`{"node_id", "reason", "prompt"}` when this node waits for a person, else None."""
        if self.status not in (NodeStatus.WAITING_APPROVAL, NodeStatus.INTERRUPTED):
            return None
        reason = "interrupted" if self.status is NodeStatus.INTERRUPTED else "approval"
        prompt = (self.approval or {}).get("reason") or node.prompt or node.label()
        return {"node_id": node.id, "reason": reason, "prompt": prompt}

    def to_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__slots__}  # type: ignore[attr-defined]
        data["status"] = self.status.value
        return {k: v for k, v in data.items() if v not in (None, "") or k == "status"}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeState:
        state = cls(status=NodeStatus(data.get("status", "pending")))
        for name in ("output", "summary", "route", "error", "attempts", "started_at",
                     "finished_at", "choice", "decided_by", "approval"):
            if name in data:
                setattr(state, name, data[name])
        return state


@dataclass(slots=True)
class TaskState:
    """One task as checkpointed: its graph, its status, each node's state, and where it lives.

    `waiting` explains a `waiting_approval` status: `{"node_id", "reason": "approval" |
    "interrupted", "prompt"}` for each node the user has to answer.
    """

    task_id: str
    title: str
    graph: TaskGraph
    status: TaskStatus = TaskStatus.RUNNING
    nodes: dict[str, NodeState] = field(default_factory=dict)
    created_at: float = field(default_factory=now)
    updated_at: float = field(default_factory=now)
    provider: str = ""
    chat_id: str = ""
    thread_id: str | None = None
    requested_by: str = ""
    error: str = ""
    result: Any = None
    waiting: list[dict[str, Any]] = field(default_factory=list)
    revision: int = 0

    def __post_init__(self) -> None:
        for node in self.graph.nodes:
            self.nodes.setdefault(node.id, NodeState())

    def node_state(self, node_id: str) -> NodeState:
        return self.nodes[node_id]

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for state in self.nodes.values():
            counts[state.status.value] = counts.get(state.status.value, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "title": self.title,
            "status": self.status.value,
            "graph": self.graph.to_dict(),
            "nodes": {k: v.to_dict() for k, v in self.nodes.items()},
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "provider": self.provider,
            "chat_id": self.chat_id,
            "thread_id": self.thread_id,
            "requested_by": self.requested_by,
            "error": self.error,
            "result": self.result,
            "waiting": self.waiting,
            "revision": self.revision,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskState:
        return cls(
            task_id=str(data["task_id"]),
            title=str(data.get("title", "")),
            graph=TaskGraph.from_dict(data["graph"]),
            status=TaskStatus(data.get("status", "running")),
            nodes={str(k): NodeState.from_dict(v) for k, v in data.get("nodes", {}).items()},
            created_at=float(data.get("created_at", 0.0)),
            updated_at=float(data.get("updated_at", 0.0)),
            provider=str(data.get("provider", "")),
            chat_id=str(data.get("chat_id", "")),
            thread_id=data.get("thread_id"),
            requested_by=str(data.get("requested_by", "")),
            error=str(data.get("error", "")),
            result=data.get("result"),
            waiting=list(data.get("waiting", [])),
            revision=int(data.get("revision", 0)),
        )


# -- ids, the chat a task belongs to, its story, and why a change is refused -------------

_TASK_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class TaskError(SoulFlowError):
    """The base of the task graphs' errors: a decision that does not apply, a graph that
    cannot run (`graph.GraphValidationError`), a plan the model could not make
    (`planner.PlanError`)."""


class TaskDecisionError(TaskError):
    """A decision that does not apply (unknown task or node, nothing waiting, wrong choice)."""


class TaskFenced(TaskDecisionError):
    """This node may not write the task: the partition of its chat is held by another node (or
    by none, or this node's hold on it lapsed), so the node that holds it runs the task. A
    runner that gets this stops at once without marking anything; a decision or cancel made
    here is refused with this message (answer in the task's chat instead)."""


def new_task_id() -> str:
    return "t-" + secrets.token_hex(4)


def task_chat_key(task: TaskState) -> str:
    """The chat a task belongs to (`provider:chat_id`): the node holding it runs the task."""
    return f"{task.provider}:{task.chat_id}"


def detail_entry(line: str, at: float | None = None) -> str:
    """One line of a task's story as stored: `- <local time> <text>`."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now() if at is None else at))
    return f"- {stamp} {line.strip()}"


def check_task_id(task_id: str) -> None:
    if not _TASK_ID_RE.fullmatch(task_id):
        raise ValueError(f"bad task id {task_id!r}")
