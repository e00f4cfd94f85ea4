"""The planner: asks the model to turn a request into a task graph, and checks what comes back.

The model answers with a JSON plan. It must pass the JSON schema below and then `validate_graph`
(cycles, missing dependencies, unknown tools, conditional edges to unknown nodes). A plan that
fails either is sent back once with the exact problems - models usually fix a plan they are
shown the errors of - and a second failure is reported as a `PlanError` with both attempts'
problems, never run half-valid.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

from soulflow.contracts import Provider
from soulflow.tasks.graph import GraphValidationError, validate_graph
from soulflow.tasks.model import NodeKind, TaskError, TaskGraph

MAX_SCHEMA_PROBLEMS = 8

_NODE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "kind"],
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$"},
        "kind": {"enum": [k.value for k in NodeKind]},
        "title": {"type": "string"},
        "goal": {"type": "string"},
        "tools": {"type": "array", "items": {"type": "string"}},
        "tool": {"type": "string"},
        "params": {"type": "object"},
        "inputs": {"type": "object"},
        "depends_on": {"type": "array", "items": {"type": "string"}},
        "prompt": {"type": "string"},
        "output_schema": {"type": "object"},
    },
    "allOf": [
        {"if": {"properties": {"kind": {"const": "agent"}}},
         "then": {"required": ["goal"]}},
        {"if": {"properties": {"kind": {"const": "tool"}}},
         "then": {"required": ["tool"]}},
        {"if": {"properties": {"kind": {"const": "approval"}}},
         "then": {"required": ["prompt"]}},
    ],
}

PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["title", "nodes"],
    "additionalProperties": False,
    "properties": {
        "title": {"type": "string", "minLength": 1},
        "nodes": {"type": "array", "minItems": 1, "maxItems": 40, "items": _NODE_SCHEMA},
        "conditions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["source", "routes"],
                "additionalProperties": False,
                "properties": {
                    "source": {"type": "string"},
                    "routes": {"type": "object", "additionalProperties": {"type": "string"}},
                    "default": {"type": "string"},
                },
            },
        },
    },
}

SYSTEM_PROMPT = """You plan multi-step work as a task graph. Answer with one JSON object only:
{"title": str, "nodes": [node...], "conditions": [edge...]}.
A node: {"id", "kind": "agent"|"tool"|"approval", ...}
- agent: "goal" (what this step must achieve) and "tools" (the only tools it may use);
- tool: "tool" (one tool name) and "params";
- approval: "prompt" (the question the user approves before the next steps run).
"depends_on": ids that must finish first. Nodes with no dependency between them run in
parallel. "inputs": {"name": {"from": "node_id"}} passes that node's result (implies a
dependency). A conditional edge {"source": id, "routes": {"<route>": "node_id"}} lets the
source's result pick one next node. Put an approval node before any step that sends messages,
spends money or changes things outside the workspace. No cycles.
Available tools: """


class PlanError(TaskError):
    """The model did not produce a valid plan after the retry; `problems` has both attempts'."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("no valid plan:\n" + "\n".join(f"- {p}" for p in problems))


@dataclass(slots=True)
class Plan:
    title: str
    graph: TaskGraph
    attempts: int

    @property
    def risky(self) -> bool:
        """True when the plan has an approval gate: it is shown to the user before it runs."""
        return any(n.kind is NodeKind.APPROVAL for n in self.graph.nodes)


class Planner:
    """Turns a request into a validated `Plan` with one model (one retry on an invalid plan)."""

    def __init__(self, provider: Provider, tool_names: Collection[str],
                 tool_descriptions: dict[str, str] | None = None) -> None:
        self.provider = provider
        self.tool_names = sorted(tool_names)
        self.tool_descriptions = tool_descriptions or {}
        self._validator = Draft202012Validator(PLAN_SCHEMA)

    def system_prompt(self) -> str:
        lines = [f"- {name}: {self.tool_descriptions.get(name, '')}".rstrip(": ")
                 for name in self.tool_names]
        return SYSTEM_PROMPT + ("\n" + "\n".join(lines) if lines else "none")

    async def plan(self, request: str) -> Plan:
        """Ask, check, ask again once with the problems; raise `PlanError` if still invalid."""
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": self.system_prompt()},
            {"role": "user", "content": request},
        ]
        all_problems: list[str] = []
        for attempt in (1, 2):
            result = await self.provider.chat(messages)
            graph, problems = self.check(result.content)
            if graph is not None:
                title = _title_of(result.content) or request[:60]
                return Plan(title=title, graph=graph, attempts=attempt)
            all_problems.extend(f"attempt {attempt}: {p}" for p in problems)
            messages.append({"role": "assistant", "content": result.content})
            messages.append({"role": "user", "content": (
                "That plan is invalid:\n" + "\n".join(f"- {p}" for p in problems)
                + "\nAnswer with the corrected JSON plan only.")})
        raise PlanError(all_problems)

    def check(self, content: str) -> tuple[TaskGraph | None, list[str]]:
        """Parse and validate a plan text: the graph, or None and every problem found."""
        try:
            data = json.loads(_json_text(content))
        except json.JSONDecodeError as exc:
            return None, [f"the answer is not JSON ({exc.msg} at line {exc.lineno})"]
        errors = sorted(self._validator.iter_errors(data), key=lambda e: list(e.absolute_path))
        if errors:
            return None, [_schema_problem(e) for e in errors[:MAX_SCHEMA_PROBLEMS]]
        graph = TaskGraph.from_dict(data)
        try:
            validate_graph(graph, self.tool_names)
        except GraphValidationError as exc:
            return None, list(exc.problems)
        return graph, []


_FENCE_RE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def _json_text(content: str) -> str:
    """The JSON inside a reply: a fenced block if there is one, else from the first brace."""
    match = _FENCE_RE.search(content)
    if match:
        return match.group(1).strip()
    start, end = content.find("{"), content.rfind("}")
    return content[start:end + 1] if 0 <= start < end else content.strip()


def _title_of(content: str) -> str:
    try:
        data = json.loads(_json_text(content))
    except json.JSONDecodeError:
        return ""
    return str(data.get("title", "")) if isinstance(data, dict) else ""


def _schema_problem(error: Any) -> str:
    where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
    return f"{where}: {error.message}"
