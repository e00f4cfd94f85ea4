"""Tasks in the chat: starting one (`/task <request>`, the `task` tool), the plan review, and
people's answers to a waiting task, by reply or reaction.

Starting: the planner turns the request into a graph. A plan with risky steps (an approval
gate, a tool node whose call needs approval, an agent node allowed a tool that is not
idempotent) is shown first and kept as a proposal (proposals.py): the requester (or an admin)
answers `approve` to run it, `cancel` to drop it, or writes what to change, which goes back to
the planner as an edit and the new plan is shown again. A plan without risky steps starts at
once.

Answers to a waiting task follow the rules of run approvals (`ApproverPolicy`): only the person
who asked for the task, an admin or the local operator decide - only an admin or the local
operator when the waiting step's tool call asked for an admins-only approval (a change to the
operator's files); anyone else is told so and nothing changes. Approving the plan never
approves such a call: the step still waits for an admin when it comes to it. A chat where an
agent run waits for an approval or an answer keeps that priority unless the message names the
task (`approve t-1a2b3c4d`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from soulflow.agent.approvals import (
    APPROVE,
    CANCEL,
    CLARIFY,
    DENY,
    ApproverPolicy,
    Decider,
    Requester,
    parse_decision,
    refusal_text,
)
from soulflow.agent.tools.code_secrets import with_code_secret_reason
from soulflow.backends.base import ProposalMap
from soulflow.contracts import ApprovalNeed, ChatRef, InboundMessage
from soulflow.tasks.commands import make_task_command
from soulflow.tasks.engine import TaskEngine
from soulflow.tasks.executors import DaemonExecutors
from soulflow.tasks.graph import GraphValidationError
from soulflow.tasks.model import (
    Choice,
    NodeKind,
    TaskDecisionError,
    TaskGraph,
    TaskState,
    task_chat_key,
)
from soulflow.tasks.planner import Plan, PlanError, Planner
from soulflow.tasks.review import Proposal

log = logging.getLogger(__name__)

TASK_ID_RE = re.compile(r"\b(t-[0-9a-f]{8})\b")
_RETRY = frozenset({"retry", "again", "다시", "재시도"})
_MARK_DONE = frozenset({"mark done", "mark_done", "done", "완료"})

PlannerFactory = Callable[[], Planner | None]
AgentWaiting = Callable[[str, Decider], bool]  # (chat_key, decider) -> a chat run waits


@dataclass(frozen=True, slots=True)
class Asker:
    """Who starts a task and where its messages go."""

    provider: str
    chat_id: str
    thread_id: str | None
    user_id: str

    @property
    def chat_key(self) -> str:
        return f"{self.provider}:{self.chat_id}"

    @classmethod
    def of(cls, message: InboundMessage) -> Asker:
        return cls(message.provider, message.chat_id, message.thread_id, message.sender_id)


def plan_risks(graph: TaskGraph, executors: DaemonExecutors,
               chat: ChatRef | None = None) -> list[str]:
    """Why a plan must be shown before it runs (empty: it may start at once): a gate, a tool
    step whose call (as planned) only an admin may approve, that changes things or that needs
    approval, an agent step allowed a tool that changes things."""
    risks: list[str] = []
    tools = executors.tools
    for node in graph.nodes:
        if node.kind is NodeKind.APPROVAL:
            risks.append(f"{node.id} is an approval gate")
        elif node.kind is NodeKind.TOOL:
            tool = tools.get(node.tool)
            need = _approval_need(executors, node, chat) if chat is not None else None
            if need is not None and need.admins_only:
                risks.append(f"{node.id} calls {node.tool}, which only an admin can approve "
                             f"when the step runs ({need.reason})")
            elif tool is None or not tool.idempotent:
                risks.append(f"{node.id} calls {node.tool}, which changes things")
            elif need is not None:
                risks.append(f"{node.id} calls {node.tool}, which needs approval "
                             f"({need.reason})")
        else:
            unsafe = [t for t in node.tools if not executors.tool_is_idempotent(t)]
            if unsafe:
                risks.append(f"{node.id} may use {', '.join(sorted(unsafe))}")
    return risks


def _approval_need(executors: DaemonExecutors, node: Any, chat: ChatRef) -> ApprovalNeed | None:
    """The approval rule the registry applies (the tool's own, and code run with a secret)
    on the planned params (inputs injected later are unknown: the step still asks then, if it
    has to)."""
    tool = executors.tools.get(node.tool)
    if tool is None:
        return None
    try:
        params = dict(node.params)
        return with_code_secret_reason(
            tool.needs_approval(params, executors.tool_context(chat, False)), tool, params)
    except Exception as exc:  # params the tool rejects: the step will fail visibly; show it
        return ApprovalNeed(f"its params look wrong: {exc}")


def plan_text(title: str, graph: TaskGraph, risks: list[str]) -> str:
    lines = [f"Plan: {title}"]
    for index, node in enumerate(graph.nodes, 1):
        after = f" (after {', '.join(node.depends_on)})" if node.depends_on else ""
        if node.kind is NodeKind.AGENT:
            what = f"{node.goal} [tools: {', '.join(node.tools) or 'none'}]"
        elif node.kind is NodeKind.TOOL:
            params = json.dumps(node.params, ensure_ascii=False)
            what = f"`{node.tool}` {params if len(params) <= 200 else params[:199] + '…'}"
        else:
            what = f"ask for approval: {node.prompt}"
        lines.append(f"{index}. {node.id}{after}: {what}")
    if risks:
        lines.append("Needs your OK because: " + "; ".join(risks) + ".")
    lines.append("Reply approve to run it, cancel to drop it, or write what to change.")
    return "\n".join(lines)


class TaskChat:
    """The chat side of tasks (see the module docstring)."""

    def __init__(self, engine: TaskEngine, executors: DaemonExecutors, planner: PlannerFactory,
                 proposals: ProposalMap, approvers: ApproverPolicy, *,
                 agent_waiting: AgentWaiting | None = None) -> None:
        self.engine = engine
        self.store = engine.store
        self.executors = executors
        self.planner = planner
        self.proposals = proposals
        self.approvers = approvers
        self.agent_waiting = agent_waiting
        self._list_show = make_task_command(self.store, engine.cancel, approvers.is_admin)
        self._cancels: set[asyncio.Task[Any]] = set()

    # -- /task ---------------------------------------------------------------------------

    async def command(self, command: Any, message: InboundMessage) -> str:
        """`/task list|show ID|cancel ID`, or `/task <request>` to plan and start one."""
        words = command.args.split()
        if not words or words[0] in ("list", "show", "cancel"):
            return await self._list_show(command, message)
        return await self.start(Asker.of(message), command.args.strip())

    async def start(self, asker: Asker, request: str) -> str:
        """Plan `request`; start it, or show it for review when it has risky steps."""
        planner = self.planner()
        if planner is None:
            return "No model provider is configured, so I cannot plan tasks."
        try:
            plan = await planner.plan(request)
        except PlanError as exc:
            return "I could not make a valid plan:\n" + "\n".join(f"- {p}" for p in exc.problems)
        await self.proposals.pop(asker.chat_key)  # a new request replaces a plan under review
        return await self._offer(asker, request, plan, edits=[])

    async def _offer(self, asker: Asker, request: str, plan: Plan, edits: list[str]) -> str:
        risks = plan_risks(plan.graph, self.executors, ChatRef(
            asker.provider, asker.chat_id, asker.thread_id, sender_id=asker.user_id,
            requester_id=asker.user_id))
        if not risks and not edits:
            return await self._submit(asker, plan.title, plan.graph)
        await self.proposals.put(asker.chat_key, Proposal(
            chat={"provider": asker.provider, "chat_id": asker.chat_id,
                  "thread_id": asker.thread_id},
            requested_by=asker.user_id, request=request, title=plan.title,
            graph=plan.graph.to_dict(), risks=risks, edits=edits))
        return plan_text(plan.title, plan.graph, risks)

    async def _submit(self, asker: Asker, title: str, graph: TaskGraph) -> str:
        try:
            task = await self.engine.submit(graph, title=title, provider=asker.provider,
                                            chat_id=asker.chat_id, thread_id=asker.thread_id,
                                            requested_by=asker.user_id)
        except GraphValidationError as exc:
            return f"The plan cannot run:\n{exc}"
        return (f"Started task {task.task_id}: {title} ({len(graph.nodes)} steps). I will "
                f"post progress here; /task show {task.task_id} for details, /task cancel "
                f"{task.task_id} to stop it.")

    # -- replies -------------------------------------------------------------------------

    async def reply(self, message: InboundMessage) -> str | None:
        """The answer to a message that is for a task (a proposal or a waiting task), or None
        when the message is not for a task and goes on to the agent."""
        decider = Decider(message.provider, message.sender_id, message.sender_name)
        text = message.text.strip()
        named = TASK_ID_RE.search(text)
        proposal = await self.proposals.get(message.chat_key)
        if proposal is not None and named is None:
            answer = await self._answer_proposal(message, proposal, decider, text)
            if answer is not None:
                return answer
        decision = _task_decision(text)
        if decision is None:
            return None
        task = await self._waiting_task(message, named.group(1) if named else None)
        if task is None:
            return None
        if named is None and self.agent_waiting is not None \
                and self.agent_waiting(message.chat_key, decider):
            return None  # the chat's run approval comes first; naming the task overrides
        return await self.decide(task, decision, decider)

    async def decide(self, task: TaskState, decision: str, decider: Decider) -> str:
        """Apply a person's answer to the task's first waiting step (same rules as runs: an
        admins-only tool approval only by an admin or the local operator)."""
        requester = Requester(task.provider, task.requested_by)
        steps = waiting_steps(task)
        need = _waiting_need(task, steps[0] if steps else None)
        if not self.approvers.may_decide(requester, decider, admins_only=need.admins_only):
            return refusal_text(requester, admins_only=need.admins_only, reason=need.reason)
        if not steps:
            return f"Task {task.task_id} is not waiting for anything."
        waiting = steps[0]
        node_id, reason = str(waiting["node_id"]), str(waiting.get("reason"))
        if decision == CLARIFY:
            return f"Task {task.task_id} waits at step {node_id}: {waiting.get('prompt', '')}"
        if decision == CANCEL:
            return await self._cancel_text(task.task_id, decider.user_id)
        choice = _choice_for(decision, reason)
        if choice is None:
            return (f"Step {node_id} of task {task.task_id} takes "
                    + ("retry, mark done or deny." if reason == "interrupted"
                       else "approve or deny."))
        try:
            await self.engine.decide(task.task_id, node_id, choice, by=decider.user_id)
        except TaskDecisionError as exc:
            return f"Could not decide: {exc}."
        verb = {Choice.APPROVE: "approved", Choice.DENY: "denied", Choice.RETRY: "retrying",
                Choice.MARK_DONE: "marked done"}[choice]
        return f"Task {task.task_id}: step {node_id} {verb}."

    async def decide_reaction(self, task_id: str, node_id: str, decision: str,
                              decider: Decider) -> str | None:
        """A reaction on a task's prompt; None when it changes nothing (an unknown message,
        or someone who may not decide: answering every such reaction would let anyone make
        the bot post)."""
        task = await self.store.fetch(task_id)
        steps = waiting_steps(task) if task is not None else []
        if task is None or task.status.finished or not any(
                w["node_id"] == node_id for w in steps):
            return None
        if not self.approvers.may_decide(Requester(task.provider, task.requested_by), decider,
                                         admins_only=_waiting_need(task, steps[0]).admins_only):
            return None
        return await self.decide(task, decision, decider)

    async def _answer_proposal(self, message: InboundMessage, proposal: Proposal,
                               decider: Decider, text: str) -> str | None:
        requester = Requester(message.provider, proposal.requested_by)
        parsed = parse_decision(text)
        allowed = self.approvers.may_decide(requester, decider)
        if not allowed:
            return refusal_text(requester) if parsed is not None else None
        asker = Asker(message.provider, message.chat_id,
                      proposal.chat.get("thread_id"), proposal.requested_by)
        if parsed is not None and parsed[0] == APPROVE:
            await self.proposals.pop(message.chat_key)
            return await self._submit(asker, proposal.title, proposal.task_graph())
        if parsed is not None and parsed[0] in (DENY, CANCEL):
            await self.proposals.pop(message.chat_key)
            return f"OK, I dropped the plan \"{proposal.title}\"."
        if parsed is not None or not text or text.startswith("/"):
            return None
        planner = self.planner()
        if planner is None:
            return "No model provider is configured, so I cannot change the plan."
        edit = (f"{proposal.request}\n\nThe current plan (JSON):\n"
                f"{json.dumps(proposal.graph, ensure_ascii=False)}\n\nChange the plan as "
                f"follows and answer with the whole new plan: {text}")
        try:
            plan = await planner.plan(edit)
        except PlanError as exc:
            return ("I could not make a valid plan from that change (the previous plan still "
                    "stands):\n" + "\n".join(f"- {p}" for p in exc.problems))
        return await self._offer(asker, proposal.request, plan, [*proposal.edits, text])

    async def _waiting_task(self, message: InboundMessage,
                            task_id: str | None) -> TaskState | None:
        if task_id is not None:
            task = await self.store.fetch(task_id)
            here = task is not None and task.provider == message.provider \
                and task.chat_id == message.chat_id
            return task if here and task is not None and waiting_steps(task) else None
        waiting = [t for t in await self.store.fetch_list(provider=message.provider,
                                                          chat_id=message.chat_id)
                   if waiting_steps(t)]
        return waiting[0] if waiting else None

    # -- cancelling ----------------------------------------------------------------------

    async def _cancel_text(self, task_id: str, by: str) -> str:
        try:
            task = await self.engine.cancel(task_id, by)
        except TaskDecisionError as exc:
            return f"Could not cancel: {exc}."
        return f"Task {task.task_id} is {task.status.value}."

    async def stop_chat(self, chat_key: str) -> int:
        """`/stop`: cancel the chat's unfinished tasks (in the background: /stop answers once
        they are found); returns how many. A proposal waiting for review is dropped too. Both
        reads wait for the store off the event loop (`fetch_unfinished`, `ProposalMap.pop`)."""
        dropped = 1 if await self.proposals.pop(chat_key) is not None else 0
        tasks = [t for t in await self.store.fetch_unfinished(chats=chat_key.__eq__)
                 if task_chat_key(t) == chat_key]
        for task in tasks:
            job = asyncio.create_task(self._cancel_quietly(task.task_id),
                                      name=f"task-cancel-{task.task_id}")
            self._cancels.add(job)
            job.add_done_callback(self._cancels.discard)
        return len(tasks) + dropped

    async def _cancel_quietly(self, task_id: str) -> None:
        try:
            await self.engine.cancel(task_id, "/stop")
        except TaskDecisionError:
            pass  # finished meanwhile
        except Exception:
            log.exception("cancelling task %s on /stop failed", task_id)

    async def stop(self) -> None:
        """Let cancels started by /stop finish (they only record states)."""
        if self._cancels:
            await asyncio.gather(*list(self._cancels), return_exceptions=True)


def waiting_steps(task: TaskState) -> list[dict[str, Any]]:
    """What the task waits on, read from its steps: the prompt is posted as soon as a step
    starts waiting, a moment before the task's own `waiting` list is checkpointed."""
    if task.status.finished:
        return []
    return [entry for node in task.graph.nodes if task.nodes[node.id].choice is None
            and (entry := task.nodes[node.id].waiting_entry(node)) is not None]


def _waiting_need(task: TaskState, step: dict[str, Any] | None) -> ApprovalNeed:
    """Who may answer the waiting step: its tool call's approval says when only admins may (a
    checkpoint from before that flag existed holds an ordinary approval, as it did)."""
    if step is None:
        return ApprovalNeed("")
    approval = task.nodes[str(step["node_id"])].approval or {}
    return ApprovalNeed(str(approval.get("reason") or step.get("prompt") or ""),
                        admins_only=bool(approval.get("admins_only")))


def _task_decision(text: str) -> str | None:
    """approve/deny/cancel/clarify (as for runs), or retry / mark_done, from a whole message."""
    rest = TASK_ID_RE.sub(" ", text).strip().strip(".!").strip().casefold()
    rest = " ".join(rest.split())
    if rest in _RETRY:
        return "retry"
    if rest in _MARK_DONE:
        return "mark_done"
    parsed = parse_decision(rest)
    return parsed[0] if parsed is not None else None


def _choice_for(decision: str, reason: str) -> Choice | None:
    if reason == "interrupted":
        return {"retry": Choice.RETRY, APPROVE: Choice.RETRY, "mark_done": Choice.MARK_DONE,
                DENY: Choice.DENY}.get(decision)
    return {APPROVE: Choice.APPROVE, DENY: Choice.DENY}.get(decision)

