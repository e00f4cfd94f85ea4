"""Checking a graph before anything runs, and the pure scheduling rules the runner applies.

Validation collects every problem into one `GraphValidationError`, because a planner (a model)
or a user fixing a plan needs the whole list at once, not one error per attempt.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from soulflow.tasks.model import NodeKind, NodeStatus, TaskError, TaskGraph, TaskNode, TaskState


class GraphValidationError(TaskError):
    """The graph cannot run; `problems` lists every reason, each one line."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("the task graph is invalid:\n" + "\n".join(f"- {p}" for p in problems))


def validate_graph(graph: TaskGraph, tool_names: Collection[str] | None = None) -> None:
    """Raise `GraphValidationError` listing every problem; `tool_names=None` skips tool checks.

    Checks: empty graph, duplicate or empty ids, a node without what its kind needs, missing
    dependencies, unknown tools, conditional edges naming unknown nodes or a target more than
    once, and cycles (conditional edges included: a loop-back edge is a cycle here).
    """
    problems: list[str] = []
    if not graph.nodes:
        problems.append("the graph has no nodes")
    ids: set[str] = set()
    for node in graph.nodes:
        if not node.id.strip():
            problems.append("a node has an empty id")
        elif node.id in ids:
            problems.append(f"node id {node.id!r} is used twice")
        ids.add(node.id)
    for node in graph.nodes:
        problems.extend(_node_problems(node, ids, tool_names))
    for edge in graph.conditions:
        if edge.source not in ids:
            problems.append(f"a conditional edge starts at unknown node {edge.source!r}")
        if not edge.routes and edge.default is None:
            problems.append(f"the conditional edge from {edge.source!r} has no routes")
        for target in edge.targets():
            if target not in ids:
                problems.append(f"the conditional edge from {edge.source!r} leads to unknown "
                                f"node {target!r}")
            elif target == edge.source:
                problems.append(f"the conditional edge from {edge.source!r} leads to itself")
    targeted: dict[str, str] = {}
    for edge in graph.conditions:
        for target in edge.targets():
            if target in targeted and targeted[target] != edge.source:
                problems.append(f"node {target!r} is the target of conditional edges from both "
                                f"{targeted[target]!r} and {edge.source!r}")
            targeted[target] = edge.source
    if not problems:
        cycle = find_cycle(graph)
        if cycle:
            problems.append("the graph has a cycle: " + " -> ".join(cycle))
    if problems:
        raise GraphValidationError(problems)


def _node_problems(node: TaskNode, ids: set[str],
                   tool_names: Collection[str] | None) -> list[str]:
    problems: list[str] = []
    where = f"node {node.id!r}"
    if node.kind is NodeKind.AGENT and not node.goal.strip():
        problems.append(f"{where} is an agent run without a goal")
    if node.kind is NodeKind.TOOL and not node.tool:
        problems.append(f"{where} is a tool call without a tool name")
    if node.kind is NodeKind.APPROVAL and not (node.prompt or node.title).strip():
        problems.append(f"{where} is an approval gate without a prompt")
    for dep in node.depends_on:
        if dep not in ids:
            problems.append(f"{where} depends on unknown node {dep!r}")
        elif dep == node.id:
            problems.append(f"{where} depends on itself")
    for name, value in node.inputs.items():
        if isinstance(value, dict) and "from" in value:
            if set(value) - {"from", "path"}:
                problems.append(f"{where} input {name!r}: a reference takes only 'from' and "
                                f"'path'")
            elif str(value["from"]) not in ids:
                problems.append(f"{where} input {name!r} refers to unknown node "
                                f"{value['from']!r}")
    if tool_names is not None:
        wanted = [node.tool] if node.kind is NodeKind.TOOL and node.tool else list(node.tools)
        for tool in wanted:
            if tool not in tool_names:
                known = ", ".join(sorted(tool_names)) or "none"
                problems.append(f"{where} uses unknown tool {tool!r} (known: {known})")
    return problems


def find_cycle(graph: TaskGraph) -> list[str]:
    """One cycle as a path `[a, b, a]`, or `[]`. Depth-first, iterative (no recursion limit)."""
    deps = graph.dependencies()
    dependents: dict[str, list[str]] = {n: [] for n in deps}
    for node_id, node_deps in deps.items():
        for dep in node_deps:
            if dep in dependents:
                dependents[dep].append(node_id)
    colour: dict[str, int] = dict.fromkeys(deps, 0)  # 0 new, 1 on the stack, 2 done
    for start in deps:
        if colour[start]:
            continue
        path: list[str] = [start]
        stack = [iter(dependents[start])]
        colour[start] = 1
        while stack:
            child = next(stack[-1], None)
            if child is None:
                colour[path.pop()] = 2
                stack.pop()
            elif colour[child] == 1:
                return path[path.index(child):] + [child]
            elif colour[child] == 0:
                colour[child] = 1
                path.append(child)
                stack.append(iter(dependents[child]))
    return []


def execution_groups(graph: TaskGraph) -> list[list[str]]:
    """Nodes by level: every node of a level depends only on earlier levels (shown to users;
    the runner itself starts each node as soon as its own dependencies are met)."""
    deps = graph.dependencies()
    level: dict[str, int] = {}
    remaining = dict(deps)
    while remaining:
        progressed = False
        for node_id, node_deps in list(remaining.items()):
            if all(d in level for d in node_deps):
                level[node_id] = 1 + max((level[d] for d in node_deps), default=-1)
                del remaining[node_id]
                progressed = True
        if not progressed:
            raise GraphValidationError(["the graph has a cycle"])
    groups: list[list[str]] = [[] for _ in range(1 + max(level.values(), default=-1))]
    for node in graph.nodes:
        groups[level[node.id]].append(node.id)
    return groups


def not_taken(task: TaskState, target: str) -> bool:
    """True when a conditional edge into `target` has been decided and picked another node."""
    for edge in task.graph.conditions:
        if target in edge.targets():
            source = task.nodes[edge.source]
            if source.status is NodeStatus.SKIPPED:
                return True
            if source.status is NodeStatus.COMPLETED and edge.pick(source.route) != target:
                return True
    return False


def propagate_skips(task: TaskState) -> list[str]:
    """Mark pending nodes skipped when their branch was not taken or all their dependencies
    were skipped; repeats until nothing changes. Returns the newly skipped ids."""
    deps = task.graph.dependencies()
    skipped: list[str] = []
    changed = True
    while changed:
        changed = False
        for node_id, node_deps in deps.items():
            state = task.nodes[node_id]
            if state.status is not NodeStatus.PENDING:
                continue
            all_skipped = bool(node_deps) and all(
                task.nodes[d].status is NodeStatus.SKIPPED for d in node_deps)
            if not_taken(task, node_id) or all_skipped:
                state.status = NodeStatus.SKIPPED
                skipped.append(node_id)
                changed = True
    return skipped


def ready_nodes(task: TaskState) -> list[TaskNode]:
    """Pending nodes whose dependencies are all settled (completed or skipped), in graph order."""
    deps = task.graph.dependencies()
    return [
        node for node in task.graph.nodes
        if task.nodes[node.id].status is NodeStatus.PENDING
        and all(task.nodes[d].status.settled for d in deps[node.id])
    ]


def resolve_inputs(task: TaskState, node: TaskNode) -> dict[str, Any]:
    """The node's inputs with every `{"from": id, "path": "a.b"}` replaced by that node's output
    (or the part of it the dotted path names; `None` when the source was skipped)."""
    resolved: dict[str, Any] = {}
    for name, value in node.inputs.items():
        if isinstance(value, dict) and "from" in value:
            source = task.nodes[str(value["from"])]
            output = source.output if source.status is NodeStatus.COMPLETED else None
            resolved[name] = _dig(output, str(value.get("path", "")))
        else:
            resolved[name] = value
    return resolved


def _dig(value: Any, path: str) -> Any:
    for part in filter(None, path.split(".")):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value
