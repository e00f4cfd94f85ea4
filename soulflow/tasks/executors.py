"""The daemon's node executors: agent nodes run on the agent loop, tool nodes through the
ToolRegistry, both in the task's chat.

- An **agent node** is an ordinary event-thread run (journaled in the daemon's run journal, so it
  survives a restart like any run) driven by an `AgentLoop` whose registry holds ONLY the node's
  allowed tools: the model is offered nothing else, and a call to anything else is an unknown
  tool. Its chat is the task's chat with `requester_id` = the person who asked for the task, so
  secret scopes and approval rules are those of a run that person started. The run is found
  again by its key (`task:<task_id>:<node_id>`) when the node runs again: after a restart (when
  the node is idempotent or the user said `retry`) or after an approval, the same run continues.
- A **tool node** is one `ToolRegistry.execute` call (the one execution path: schema checks,
  approval rule, secret references, timeout, masking) with a `ToolContext` for the task's chat.

A tool call that needs approval pauses the node (`NodeOutcome.needs_approval`): the task waits
for the requester or an admin in the chat (see chat.py), and the node runs again with the answer.
A call whose approval is admins-only (a change to the operator's files) says so in the node's
`approval` (``admins_only``): then only an admin or the local operator may answer it.
A question the agent asks (`request_more_information`) gets a standing answer: nobody is on the
other end of a task step, the goal is all there is.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from soulflow.agent.budget import Budgets
from soulflow.agent.run import events as ev
from soulflow.agent.run.loop import AgentLoop, ContextFactory, RunOutcome, SystemPrompt
from soulflow.agent.tools.base import ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.agent.usage import UsageMeter
from soulflow.backends.base import RunJournal
from soulflow.contracts import ChatRef, Provider
from soulflow.security.redact import Redactor
from soulflow.tasks.contracts import NodeCall, NodeExecutors
from soulflow.tasks.model import NodeOutcome, OutcomeStatus, TaskState

log = logging.getLogger(__name__)

TASK_TOOL = "task"  # the tool that starts tasks: never available inside one
#: tools a task never uses: `task` (no tasks in tasks) and `spawn` (a sub-agent runs with every
#: tool, which would escape a step's allow-list; the graph itself runs steps in parallel)
EXCLUDED_TOOLS = (TASK_TOOL, "spawn")
NO_USER_ANSWER = ("Nobody can answer questions during this step of the task. Use your best "
                  "judgment with the goal and inputs you have, and finish with your result.")
MAX_AUTO_ANSWERS = 2
SUMMARY_CHARS = 200

ChatToolContext = Callable[[ChatRef, bool], ToolContext]  # (chat, approved)


def task_chat(task: TaskState, node_id: str | None = None) -> ChatRef:
    """The chat a task's runs and tool calls belong to; `requester_id` binds approvals to the
    person who asked for the task (empty: only admins and the local operator decide)."""
    return ChatRef(task.provider, task.chat_id, task.thread_id, sender_id=task.requested_by,
                   requester_id=task.requested_by, task_id=task.task_id,
                   node_id=node_id or "")


def is_task_run(chat: ChatRef) -> bool:
    """A run belonging to a task node: driven by the task engine, not by chat replies."""
    return bool(chat.task_id)


def run_key(task_id: str, node_id: str) -> str:
    return f"task:{task_id}:{node_id}"


@dataclass(slots=True)
class AgentParts:
    """What an agent loop is built from (the daemon's own journal, model and prompt)."""

    store: RunJournal
    provider: Callable[[], Provider]
    system_prompt: SystemPrompt
    tool_context: ContextFactory
    max_turns: int
    usage: UsageMeter | None = None  # counts the task steps' model calls
    budgets: Budgets | None = None  # and caps them


class DaemonExecutors:
    """`NodeExecutors` backed by the daemon's tools and agent loop (see the module docstring)."""

    def __init__(self, tools: ToolRegistry, tool_context: ChatToolContext,
                 agent: AgentParts | None, *, redactor: Redactor | None = None,
                 excluded: Collection[str] = EXCLUDED_TOOLS) -> None:
        self.tools = tools
        self.tool_context = tool_context
        self.agent = agent
        self.redactor = redactor
        self.excluded = frozenset(excluded)
        self._loops: dict[tuple[str, ...], AgentLoop] = {}

    def executors(self) -> NodeExecutors:
        return NodeExecutors(self.run_agent, self.run_tool, self.tool_is_idempotent)

    def tool_names(self) -> list[str]:
        """Tools a task may use (the planner's list and the graph validation's)."""
        return [name for name in self.tools.names() if name not in self.excluded]

    def tool_is_idempotent(self, name: str) -> bool:
        tool = self.tools.get(name)
        return tool is not None and tool.idempotent

    # -- tool nodes ----------------------------------------------------------------------

    async def run_tool(self, name: str, params: dict[str, Any], abort: Any, *,
                       call: NodeCall) -> NodeOutcome:
        if name in self.excluded:
            return NodeOutcome.failed(f"the {name} tool cannot be used inside a task")
        approval = call.approval or {}
        approved = approval.get("decision") == "approve"
        context = self.tool_context(task_chat(call.task, call.node.id), approved)
        context.abort = abort
        result = await self.tools.execute(name, params, context)
        if result.status == "approval_required":
            shown = json.dumps(params, ensure_ascii=False, default=str)
            shown = shown if len(shown) <= 400 else shown[:400] + "…"
            return NodeOutcome.needs_approval(
                f"run `{name}` with {shown} ({result.reason or 'this call is risky'})",
                _approval_details({"tool": name}, result.admins_only))
        if result.status != "ok":
            return NodeOutcome.failed(result.output or f"{name} failed")
        return NodeOutcome.ok(result.output, summary=_short(result.output))

    # -- agent nodes ---------------------------------------------------------------------

    async def run_agent(self, goal: str, allowed_tools: list[str], inputs: dict[str, Any],
                        abort: Any, *, call: NodeCall) -> NodeOutcome:
        if self.agent is None:
            return NodeOutcome.failed("no model provider is configured")
        loop = self._loop_for(allowed_tools)
        key = run_key(call.task.task_id, call.node.id)
        found = self.agent.store.find(inbound_key=key)
        if found:
            run_id = found[-1]  # an earlier attempt's run, left by a restart or an approval
        else:
            run_id = loop.begin(chat=task_chat(call.task, call.node.id), history=[],
                                text=goal_text(call.task, goal, allowed_tools, inputs),
                                inbound_key=key)
        self._apply_decision(loop, run_id, call)
        outcome = await loop.drive(run_id, abort)
        for _ in range(MAX_AUTO_ANSWERS):
            if outcome.status != ev.WAITING_USER:
                break
            loop.answer(run_id, NO_USER_ANSWER)
            outcome = await loop.drive(run_id, abort)
        return self._node_outcome(loop, outcome)

    def _apply_decision(self, loop: AgentLoop, run_id: str, call: NodeCall) -> None:
        """The person's answer to the run's open approval, recorded once (a re-run after a
        crash finds it already decided and just continues)."""
        approval = call.approval or {}
        decision = approval.get("decision")
        if decision not in ("approve", "deny") or approval.get("run_id") != run_id:
            return
        state = loop.store.state(run_id)
        pending = state.open_approval()
        if pending is not None and pending.get("approval_id") == approval.get("approval_id"):
            loop.decide(run_id, str(pending["approval_id"]), decision,
                        str(approval.get("by", "")), by_provider=state.chat.provider)

    def _node_outcome(self, loop: AgentLoop, outcome: RunOutcome) -> NodeOutcome:
        if outcome.status == ev.COMPLETED:
            return NodeOutcome.ok(outcome.text, summary=_short(outcome.text))
        if outcome.status == ev.MAX_TURNS_REACHED:
            return NodeOutcome(OutcomeStatus.MAX_TURNS_REACHED, outcome.text,
                               _short(outcome.text), error="the step reached its turn limit")
        if outcome.status == ev.WAITING_APPROVAL:
            approval = loop.store.state(outcome.run_id).open_approval() or {}
            arguments = json.dumps(approval.get("arguments", {}), ensure_ascii=False)
            arguments = arguments if len(arguments) <= 400 else arguments[:400] + "…"
            return NodeOutcome.needs_approval(
                f"run `{approval.get('tool', '?')}` with {arguments} "
                f"({approval.get('reason', 'this call is risky')})",
                _approval_details({"run_id": outcome.run_id, "approval_id": outcome.approval_id,
                                   "tool": approval.get("tool")},
                                  bool(approval.get("admins_only"))))
        if outcome.status == ev.WAITING_USER:
            return NodeOutcome.failed(f"the step kept asking questions: {_short(outcome.text)}")
        state = loop.store.state(outcome.run_id)
        return NodeOutcome.failed(state.error or outcome.text or f"the run {outcome.status}")

    def _loop_for(self, allowed_tools: list[str]) -> AgentLoop:
        """An agent loop offering exactly `allowed_tools` (one per distinct allow-list)."""
        assert self.agent is not None
        names = tuple(sorted({n for n in allowed_tools if n not in self.excluded}))
        loop = self._loops.get(names)
        if loop is None:
            registry = ToolRegistry(max_output_chars=self.tools.max_output_chars,
                                    redactor=self.redactor)
            for name in names:
                tool = self.tools.get(name)
                if tool is not None:
                    registry.register(tool)
            loop = AgentLoop(self.agent.store, self.agent.provider, registry,
                             self.agent.system_prompt, self.agent.tool_context,
                             max_turns=self.agent.max_turns, usage=self.agent.usage,
                             budgets=self.agent.budgets)
            self._loops[names] = loop
        return loop


def goal_text(task: TaskState, goal: str, allowed_tools: list[str],
              inputs: dict[str, Any]) -> str:
    """The node's own request to the agent: its goal, its tools and its injected inputs."""
    tools = ", ".join(sorted(allowed_tools)) or "none"
    parts = [f"You are doing one step of the task \"{task.title}\".", f"Your goal: {goal}",
             f"Tools you may use: {tools}."]
    if inputs:
        parts.append("Results of earlier steps (JSON):\n"
                     + json.dumps(inputs, ensure_ascii=False, indent=1, default=str)[:8000])
    parts.append("Finish with your result for this step only.")
    return "\n\n".join(parts)


def _approval_details(details: dict[str, Any], admins_only: bool) -> dict[str, Any]:
    """What a waiting node keeps of its approval: ``admins_only`` only when set, so the records
    of ordinary approvals read as they always did."""
    return {**details, "admins_only": True} if admins_only else details


def _short(text: Any) -> str:
    line = " ".join(str(text or "").split())
    return line if len(line) <= SUMMARY_CHARS else line[:SUMMARY_CHARS - 1] + "…"
