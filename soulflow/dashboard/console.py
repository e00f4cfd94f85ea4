"""The operator's view of the daemon: what `/api/state` adds to the runtime's own summary.

Runs and their current step, pending approvals (what, who asked, since when), task graphs,
cron jobs with their next run, decisions, workflow events, both dead-letter queues, provider
health and latency, and the per-minute message chart. Everything here passes through the
daemon's redactor before it leaves (`snapshot`): approval arguments, dead letters and cron
texts are exactly where a pasted credential would show up.

What the stores keep is read without holding the event loop: the runs, cron jobs and
decisions on the asynchronous client (`find_open`, `refresh`), the tasks and workflow events
in one call of the backend's `offload` (on Redis, its store thread); the rows are built back
on the event loop, which owns the objects they are made of.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from soulflow.agent.run import events as ev
from soulflow.agent.run.reducer import RunState
from soulflow.runtime.view import DaemonView
from soulflow.tasks.chat import waiting_steps
from soulflow.tasks.model import TaskState

RECENT_DLQ = 20
RECENT_WORKFLOW = 30
ARGUMENTS_CAP = 400
RUN_STATUSES = frozenset({ev.RUNNING, ev.WAITING_APPROVAL, ev.WAITING_USER})


def _short(value: Any, cap: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                           sort_keys=True)
    return text if len(text) <= cap else text[:cap - 1] + "…"


@dataclass(frozen=True, slots=True)
class _Stored:
    """What `snapshot` reads in one offloaded call."""

    unfinished: list[TaskState]
    tasks: list[TaskState]
    workflow: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Console:
    """Reads the runtime's services; holds nothing of its own but the redactor's hook."""

    runtime: DaemonView
    redact: Callable[[Any], Any]

    async def snapshot(self) -> dict[str, Any]:
        """The sections the page shows beyond the runtime's summary, redacted."""
        runtime = self.runtime
        runs, approvals = await self._runs()  # built as soon as read (`find_open`)
        stored = await runtime.backend.offload(self._read_stored)
        await runtime.decisions.refresh()
        await runtime.cron.store.refresh()  # last: its listing answers for a moment only
        approvals += self._task_approvals(stored.unfinished)
        return self.redact({
            "runs": runs,
            "approvals": approvals,
            "task_list": self._tasks(stored.tasks),
            "cron_jobs": self._cron(),
            "decisions": self._decisions(),
            "workflow_events": self._workflow_events(stored.workflow),
            "dlq": {"outbound": self._outbound_dlq(),
                    "inbound": [e.to_dict() for e in
                                self.runtime.bus.stats.recent_inbound_dlq[:RECENT_DLQ]]},
            "providers": self._providers(),
            "traffic": self.runtime.traffic.per_minute(self.runtime.channels.names()),
            "operator": {"auth": "token" if self.runtime.settings["DASHBOARD_TOKEN"]
                         else "loopback"},
        })

    # -- runs and approvals --------------------------------------------------------------

    def _read_stored(self) -> _Stored:
        """The offloaded reads: they touch nothing the event loop changes."""
        return _Stored(self.runtime.tasks.unfinished(), self.runtime.tasks.list(limit=30),
                       self.runtime.workflow.recent(RECENT_WORKFLOW))

    async def _runs(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        loop = self.runtime.agent.loop
        if loop is None:
            return [], []
        runs, approvals = [], []
        for run_id in await loop.store.find_open(RUN_STATUSES):
            state = loop.store.state(run_id)
            events = loop.store.events(run_id)
            started = next((e.at for e in events if e.type == ev.RUN_STARTED), None)
            chat = state.chat
            runs.append({
                "run_id": run_id, "status": state.status, "step": _step(state),
                "turns": state.turns, "max_turns": state.max_turns, "started_at": started,
                "updated_at": events[-1].at if events else None,
                "provider": chat.provider, "chat_id": chat.chat_id,
                "requester": chat.sender_name or chat.requester_id or "",
                "sub_agent": state.parent_run is not None})
            approval = state.open_approval() if state.status == ev.WAITING_APPROVAL else None
            if approval is not None:
                asked = next((e.at for e in reversed(events)
                              if e.type == ev.APPROVAL_REQUESTED
                              and e.data.get("approval_id") == approval["approval_id"]), None)
                approvals.append({
                    "kind": "run", "run_id": run_id, "approval_id": approval["approval_id"],
                    "tool": approval.get("tool", ""), "reason": approval.get("reason", ""),
                    "arguments": _short(approval.get("arguments", {}), ARGUMENTS_CAP),
                    "requester": chat.sender_name or chat.requester_id or
                    "a scheduled job", "provider": chat.provider,
                    "chat_id": chat.chat_id, "since": asked,
                    "deferred": approval.get("decision") == "defer",
                    "admins_only": bool(approval.get("admins_only"))})
        return runs, approvals

    def _task_approvals(self, unfinished: list[TaskState]) -> list[dict[str, Any]]:
        """Task graphs waiting at a step (the first one: a decision applies to it)."""
        rows = []
        for task in unfinished:
            steps = waiting_steps(task)
            if not steps:
                continue
            step = steps[0]
            interrupted = step.get("reason") == "interrupted"
            rows.append({
                "kind": "task", "task_id": task.task_id, "node_id": step["node_id"],
                "tool": f"task {task.title or task.task_id}, step {step['node_id']}",
                "reason": ("interrupted by a restart; approve runs it again"
                           if interrupted else _short(step.get("prompt", ""), 300)),
                "arguments": "", "requester": task.requested_by or "a scheduled job",
                "provider": task.provider, "chat_id": task.chat_id,
                "since": task.updated_at, "deferred": False,
                "admins_only": bool((task.nodes[step["node_id"]].approval or {})
                                    .get("admins_only"))})
        return rows

    # -- tasks, cron, decisions ----------------------------------------------------------

    @staticmethod
    def _workflow_events(recent: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The newest workflow events from their log (the journal, or the Redis stream every
        node writes: a task run on another node shows here too), shaped as hub events."""
        return [{"kind": "workflow", "at": record.get("at"), "data": record}
                for record in recent]

    @staticmethod
    def _tasks(listed: list[TaskState]) -> list[dict[str, Any]]:
        rows = []
        for task in listed:
            data = task.to_dict()
            nodes = data.get("nodes", {})
            current = [node_id for node_id, node in nodes.items()
                       if node.get("status") in ("running", "waiting_approval", "interrupted")]
            rows.append({"task_id": task.task_id, "title": task.title,
                         "status": data.get("status"), "current": current,
                         "counts": task.counts(), "updated_at": task.updated_at,
                         "provider": task.provider, "chat_id": task.chat_id,
                         "waiting": [_short(w.get("prompt", ""), 200) for w in task.waiting],
                         "error": task.error, "finished": task.status.finished})
        return rows

    def _cron(self) -> list[dict[str, Any]]:
        rows = []
        for job in self.runtime.cron.store.list():
            rows.append({"id": job.id, "name": job.name, "enabled": job.enabled,
                         "schedule": job.schedule.describe(), "chat": job.chat.to_dict(),
                         "kind": job.kind.value, "text": _short(job.text, 200),
                         "next_run_at": job.state.next_run_at,
                         "last_run_at": job.state.last_run_at,
                         "last_status": job.state.last_result, "runs": job.state.runs})
        return rows

    def _decisions(self) -> list[dict[str, Any]]:
        return [{"key": d.key, "value": _short(d.value, 300), "priority": d.priority,
                 "source": d.source, "updated_at": d.updated_at}
                for d in self.runtime.decisions.list()[:50]]

    # -- dead letters and providers ------------------------------------------------------

    def _outbound_dlq(self) -> list[dict[str, Any]]:
        letters = self.runtime.bus.stats.recent_dlq[-RECENT_DLQ:]  # the "bus:stats" loop's
        return [{"message_id": e.message.message_id, "at": e.at, "provider": e.message.provider,
                 "chat_id": e.message.chat_id, "retry_count": e.retry_count,
                 "error": _short(e.error, 300), "content": _short(e.message.content, 300)}
                for e in reversed(letters)]

    def _providers(self) -> list[dict[str, Any]]:
        runtime = self.runtime
        measured = {s.name: s.to_dict() for s in runtime.providers.stats.all()}
        rows = []
        for name in runtime.providers.names():
            row = measured.get(name) or {"name": name, "calls": 0, "errors": {},
                                         "error_count": 0, "healthy": True, "in_flight": 0,
                                         "latency": {"samples": 0}}
            rows.append({**row, "default": name == runtime.providers.default_name})
        return rows


def _step(state: RunState) -> str:
    """What a run is doing now, in a few words."""
    if state.status == ev.WAITING_APPROVAL:
        approval = state.open_approval() or {}
        return f"waiting for approval of {approval.get('tool', 'a tool')}"
    if state.status == ev.WAITING_USER:
        return "waiting for the user's answer"
    if state.started_calls:
        names = [c.get("name", "?") for c in state.pending_calls
                 if c.get("id") in state.started_calls]
        return f"running {', '.join(names) or 'a tool'}"
    if state.pending_calls:
        return f"about to call {state.pending_calls[0].get('name', 'a tool')}"
    return f"thinking (turn {state.turns + 1} of {state.max_turns})"
