"""The operator's actions from the page: decide an approval, cancel a run or a task.

Each is a JSON POST under the dashboard's guard (Host/Origin, token, JSON body), done as the
local operator (an admin: `Decider(provider="local")`), logged with who did it and from where,
announced as an `operator.action` live event, and answered with the new state (the service
adds `state` to every successful action's answer). The DLQ and cron actions live in
service.py and soulflow/cron/api.py.

Deciding an approval continues the run: that can take minutes (the tool runs, the model
answers), so it runs as a background task tracked here, and the answer comes as soon as the
decision is recorded. The chat gets the run's reply as it would after a reply in the chat.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from soulflow import tracing
from soulflow.agent.approvals import LOCAL_PROVIDER, Decider
from soulflow.agent.run import events as ev
from soulflow.contracts import ChatRef
from soulflow.dashboard.errors import DashboardError
from soulflow.runtime.view import DaemonView
from soulflow.tasks.chat import waiting_steps
from soulflow.tasks.commands import idle_canceller
from soulflow.tasks.model import TaskDecisionError
from soulflow.tasks.progress import chat_of_task

log = logging.getLogger(__name__)

DECISIONS = {"approve": "approve", "deny": "deny"}
WAITING = frozenset({ev.WAITING_APPROVAL, ev.WAITING_USER})


class ActionError(DashboardError):
    """An action that cannot be done as asked: HTTP `status` and a sentence for the page."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Operator:
    """Who pressed the button: the token holder (DASHBOARD_TOKEN set) or whoever reaches the
    loopback address, and the request's remote address."""

    who: str
    remote: str

    @classmethod
    def of(cls, request: web.Request, token_set: bool) -> Operator:
        return cls("token holder" if token_set else "local operator", request.remote or "?")

    def decider(self) -> Decider:
        return Decider(LOCAL_PROVIDER, "dashboard", f"the {self.who} (dashboard)")


def _text(body: dict[str, Any], name: str, *, required: bool = True) -> str:
    value = body.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value:
        raise ActionError(400, f"'{name}' must be a non-empty string")
    return value


class ConsoleActions:
    """The handlers; `publish(kind, data)` sends the live event announcing each action."""

    def __init__(self, runtime: DaemonView,
                 publish: Callable[[str, dict[str, Any]], None]) -> None:
        self._runtime = runtime
        self._publish = publish
        self._work: set[asyncio.Task[None]] = set()

    def announce(self, operator: Operator, action: str, target: str, **extra: Any) -> None:
        log.info("dashboard action %s %s by the %s from %s", action, target, operator.who,
                 operator.remote)
        self._publish("operator.action", {"action": action, "target": target,
                                          "by": operator.who, **extra})

    # -- approvals -----------------------------------------------------------------------

    async def decide(self, body: dict[str, Any], operator: Operator) -> dict[str, Any]:
        decision = DECISIONS.get(str(body.get("decision")))
        if decision is None:
            raise ActionError(400, "'decision' must be 'approve' or 'deny'")
        if "task_id" in body:
            return await self._decide_task(_text(body, "task_id"), decision, operator)
        run_id = _text(body, "run_id")
        approval_id = _text(body, "approval_id", required=False) or None
        agent = self._runtime.agent
        if agent.loop is None:
            raise ActionError(409, "no model provider is configured, so nothing waits")
        await agent.loop.store.read_ahead([run_id])  # not on the event loop
        state = agent.loop.store.state(run_id)
        approval = state.open_approval() if state.status == ev.WAITING_APPROVAL else None
        if approval is None or (approval_id and approval["approval_id"] != approval_id):
            raise ActionError(409, f"run {run_id} has no pending approval"
                                   f"{' ' + approval_id if approval_id else ''}; it was "
                                   "decided or cancelled already")
        chat = agent.chat_of_run(run_id)
        self._require_held(chat, run_id)
        self._spawn(f"decide:{run_id}", self._continue(run_id, approval["approval_id"],
                                                       decision, operator, chat))
        await asyncio.sleep(0)  # the task records the decision in its first step
        self.announce(operator, decision, approval["approval_id"], run_id=run_id,
                      tool=approval.get("tool", ""))
        return {"ok": True, "run_id": run_id, "approval_id": approval["approval_id"],
                "decision": decision}

    def _require_held(self, chat: ChatRef, run_id: str) -> None:
        """With several daemons (Redis), a run is driven, decided and stopped only on the node
        holding its chat: another node's write would be refused (and its /stop would not reach
        the run). Say where to act instead of answering ok and doing nothing."""
        if not self._runtime.backend.owns(chat.key):
            raise ActionError(409, f"run {run_id} is in {chat.key}, which another node holds "
                                   "right now: act on it from that node's dashboard, or in "
                                   "the chat")

    async def _decide_task(self, task_id: str, decision: str,
                           operator: Operator) -> dict[str, Any]:
        """A task graph's waiting step, decided as in its chat; the chat hears the outcome."""
        runtime = self._runtime
        task = await runtime.tasks.fetch(task_id)
        if task is None:
            raise ActionError(404, f"there is no task {task_id}")
        steps = waiting_steps(task)
        if not steps:
            raise ActionError(409, f"task {task_id} is not waiting for anything")
        text = await runtime.task_services.chat.decide(task, decision, operator.decider())
        runtime.conversation.publish_to_chat(chat_of_task(task), text)
        self.announce(operator, decision, f"task {task_id} step {steps[0]['node_id']}")
        return {"ok": True, "task_id": task_id, "decision": decision, "outcome": text}

    async def _continue(self, run_id: str, approval_id: str, decision: str, operator: Operator,
                        chat: ChatRef) -> None:
        runtime = self._runtime
        chat_key = chat.key
        with runtime.conversation.runs.track(chat_key) as abort:  # /stop in the chat still works
            reply = await runtime.agent.decide(run_id, decision, by=operator.decider(),
                                               approval_id=approval_id, abort=abort)
        if reply is None or reply.status == "refused":
            return
        with tracing.within(reply.trace):  # delivered in the run's turn's trace
            runtime.conversation.publish_to_chat(chat, reply.content, reply.approval)

    # -- cancelling ----------------------------------------------------------------------

    async def cancel_run(self, body: dict[str, Any], operator: Operator) -> dict[str, Any]:
        run_id = _text(body, "run_id")
        agent = self._runtime.agent
        if agent.loop is None:
            raise ActionError(409, "no model provider is configured, so no run exists")
        await agent.loop.store.read_ahead([run_id])  # not on the event loop
        state = agent.loop.store.state(run_id)
        if not state.run_id:
            raise ActionError(404, f"there is no run {run_id}")
        if state.finished:
            raise ActionError(409, f"run {run_id} already ended ({state.status})")
        chat = state.chat
        self._require_held(chat, run_id)
        if state.status in WAITING:
            outcome = agent.loop.cancel(run_id, f"cancelled by the {operator.who} from the "
                                                "dashboard")
            agent.forget_prompts(run_id)
            self._runtime.conversation.publish_to_chat(chat, outcome.text)
            how = "cancelled"
        else:  # running: abort it in its chat, as /stop does; the run says "Stopped."
            stopped = self._runtime.conversation.runs.stop(chat.key)
            if not stopped:
                raise ActionError(409, f"run {run_id} is resuming and cannot be stopped "
                                       "this instant; try again in a moment")
            how = "stopping"
        self.announce(operator, "cancel_run", run_id, outcome=how)
        return {"ok": True, "run_id": run_id, "outcome": how}

    async def cancel_task(self, body: dict[str, Any], operator: Operator) -> dict[str, Any]:
        task_id = _text(body, "task_id")
        runtime = self._runtime
        engine = getattr(runtime, "task_engine", None)  # a TaskEngine, when graphs run
        cancel = engine.cancel if engine is not None else idle_canceller(
            runtime.tasks, runtime.workflow.emit_task_event)
        try:
            task = await cancel(task_id, f"the {operator.who} (dashboard)")
        except TaskDecisionError as exc:
            raise ActionError(404 if "no task" in str(exc) else 409, str(exc)) from None
        self.announce(operator, "cancel_task", task_id, status=task.status.value)
        return {"ok": True, "task_id": task_id, "status": task.status.value}

    # -- lifecycle -----------------------------------------------------------------------

    def _spawn(self, name: str, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(self._guarded(work), name=name)
        self._work.add(task)
        task.add_done_callback(self._work.discard)

    @staticmethod
    async def _guarded(work: Any) -> None:
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("a dashboard action failed after it was accepted")

    async def stop(self) -> None:
        """Cancel decisions still running (the run resumes at the next start)."""
        for task in list(self._work):
            task.cancel()
        if self._work:
            await asyncio.gather(*self._work, return_exceptions=True)
        self._work.clear()
