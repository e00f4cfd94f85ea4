"""Graph validation (every problem in one error) and the scheduling helpers."""

from __future__ import annotations

import pytest

from soulflow.tasks import (
    ConditionalEdge,
    GraphValidationError,
    NodeKind,
    TaskGraph,
    TaskNode,
    TaskState,
    execution_groups,
    validate_graph,
)
from soulflow.tasks.graph import find_cycle, resolve_inputs
from soulflow.tasks.model import NodeStatus

TOOLS = {"read_file", "web_fetch", "message"}


def tool(node_id: str, name: str = "read_file", **kw: object) -> TaskNode:
    return TaskNode(id=node_id, kind=NodeKind.TOOL, tool=name, **kw)  # type: ignore[arg-type]


def problems_of(graph: TaskGraph, tools: set[str] | None = TOOLS) -> list[str]:
    with pytest.raises(GraphValidationError) as info:
        validate_graph(graph, tools)
    return info.value.problems


def test_valid_graph_passes_and_groups_by_level() -> None:
    graph = TaskGraph([
        tool("a"),
        tool("b", depends_on=["a"]),
        tool("c", inputs={"text": {"from": "a"}}),
        TaskNode(id="d", kind=NodeKind.AGENT, goal="compare", tools=["web_fetch"],
                 depends_on=["b", "c"]),
    ])
    validate_graph(graph, TOOLS)
    assert execution_groups(graph) == [["a"], ["b", "c"], ["d"]]


def test_cycle_is_rejected_with_its_path() -> None:
    graph = TaskGraph([tool("a", depends_on=["c"]), tool("b", depends_on=["a"]),
                       tool("c", depends_on=["b"])])
    assert find_cycle(graph) in (["a", "b", "c", "a"], ["b", "c", "a", "b"],
                                 ["c", "a", "b", "c"])
    [problem] = problems_of(graph)
    assert problem.startswith("the graph has a cycle: ")


def test_cycle_through_a_conditional_edge() -> None:
    graph = TaskGraph([tool("a"), tool("b", depends_on=["a"])],
                      [ConditionalEdge("b", {"again": "a"})])
    assert "cycle" in problems_of(graph)[0]


def test_every_problem_is_listed_at_once() -> None:
    graph = TaskGraph(
        [
            tool("a", depends_on=["ghost"]),
            tool("b", name="rm_rf"),
            TaskNode(id="c", kind=NodeKind.AGENT, goal="x", tools=["read_file", "shell9"],
                     inputs={"t": {"from": "nowhere"}}),
            TaskNode(id="gate", kind=NodeKind.APPROVAL),
            tool("a"),
        ],
        [ConditionalEdge("b", {"yes": "zzz"}), ConditionalEdge("missing", {"x": "a"})],
    )
    problems = problems_of(graph)
    text = "\n".join(problems)
    assert "node 'a' depends on unknown node 'ghost'" in text
    assert "node 'b' uses unknown tool 'rm_rf'" in text
    assert "node 'c' uses unknown tool 'shell9'" in text
    assert "node 'c' input 't' refers to unknown node 'nowhere'" in text
    assert "node 'gate' is an approval gate without a prompt" in text
    assert "node id 'a' is used twice" in text
    assert "the conditional edge from 'b' leads to unknown node 'zzz'" in text
    assert "a conditional edge starts at unknown node 'missing'" in text
    with pytest.raises(GraphValidationError) as info:
        validate_graph(graph, TOOLS)
    assert str(info.value).count("\n- ") == len(problems)


def test_tool_names_none_skips_the_tool_check() -> None:
    validate_graph(TaskGraph([tool("a", name="anything")]), None)


def test_empty_graph() -> None:
    assert problems_of(TaskGraph([])) == ["the graph has no nodes"]


def test_resolve_inputs_follows_paths_and_skips() -> None:
    graph = TaskGraph([tool("a"), tool("s"),
                       tool("b", inputs={"whole": {"from": "a"},
                                         "part": {"from": "a", "path": "items.1.name"},
                                         "gone": {"from": "s"}, "lit": 5})])
    task = TaskState("t-1", "x", graph)
    task.nodes["a"].status = NodeStatus.COMPLETED
    task.nodes["a"].output = {"items": [{"name": "x"}, {"name": "y"}]}
    task.nodes["s"].status = NodeStatus.SKIPPED
    resolved = resolve_inputs(task, graph.node("b"))
    assert resolved == {"whole": task.nodes["a"].output, "part": "y", "gone": None, "lit": 5}


def test_roundtrip_through_json_dicts() -> None:
    graph = TaskGraph([tool("a", params={"path": "x"}),
                       TaskNode(id="g", kind=NodeKind.APPROVAL, prompt="ok?", depends_on=["a"])],
                      [ConditionalEdge("g", {"approved": "a"}, default=None)])
    task = TaskState("t-2", "title", graph, provider="slack", chat_id="C1")
    again = TaskState.from_dict(task.to_dict())
    assert again.to_dict() == task.to_dict()
