"""Workflow events: the durable story of tasks and runs, shown live on the dashboard.

Each event is one line of `runtime/events/events.jsonl` (fields `event_id, run_id, task_id,
agent_id, phase, summary, payload, provider, channel, chat_id, thread_id, source, detail_file,
at`; `phase` is one of assign, progress, blocked, done, approval). Appending one:

1. redacts it (the `Redactor`), since events reach a file, the dashboard and the browser;
2. records it in the backend's log (`WorkflowLog`) unless its `event_id` was recorded before:
   `runtime/events/events.jsonl` with the ids in `index.json` (backends/file/workflow.py), or
   Redis, where the dedupe and the append are one script, so two nodes replaying the same step
   record it once (backends/redis/events.py);
3. when a task store is bound (`bind_task_store`): appends a line to the task's detail log
   (`runtime/tasks/details/<task_id>.md`, or its Redis list) and keeps the task's status in
   step with task-level events that carry a status;
4. publishes it to the EventHub as kind `workflow`, which the dashboard's SSE stream shows.

`provider` is the chat platform (as everywhere in SoulFlow) and `channel` the channel instance
that carries it (today the same name; kept apart for several accounts on one platform).
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from soulflow.backends.base import TaskStore, WorkflowLog
from soulflow.events.hub import EventHub
from soulflow.security.redact import Redactor
from soulflow.tasks.answers import set_status
from soulflow.tasks.model import TaskStatus
from soulflow.tasks.runner import TaskEvent

PHASES = ("assign", "progress", "blocked", "done", "approval")
HUB_KIND = "workflow"


@dataclass(slots=True)
class WorkflowEvent:
    """One workflow event; `event_id` defaults to a fresh uuid (pass a stable one to dedupe)."""

    phase: str
    summary: str
    task_id: str = ""
    run_id: str = ""
    agent_id: str = ""
    payload: dict[str, Any] = field(default_factory=dict)
    provider: str = ""
    channel: str = ""
    chat_id: str = ""
    thread_id: str | None = None
    source: str = ""
    detail_file: str = ""
    event_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {self.phase!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_task_event(cls, event: TaskEvent) -> WorkflowEvent:
        task, node_id = event.task, event.node_id
        run_id = task.task_id
        if node_id is not None:
            run_id = f"{task.task_id}/{node_id}#{task.nodes[node_id].attempts}"
        return cls(phase=event.phase, summary=event.summary, task_id=task.task_id,
                   run_id=run_id, agent_id=node_id or "", payload=dict(event.payload),
                   provider=task.provider, channel=task.provider, chat_id=task.chat_id,
                   thread_id=task.thread_id, source="task_loop", event_id=event.key)


class WorkflowEventService:
    """Appends, dedupes, redacts and publishes workflow events over the backend's `log`; see
    the module docstring."""

    def __init__(self, log: WorkflowLog, *, workspace: Path | None = None,
                 redactor: Redactor | None = None, hub: EventHub | None = None) -> None:
        self.log = log
        self.workspace = workspace
        self.redactor = redactor
        self.hub = hub
        self._store: TaskStore | None = None

    def seen(self, event_id: str) -> bool:
        return self.log.seen(event_id)

    def bind_task_store(self, store: TaskStore) -> None:
        """From now on events write the task's detail log and keep its status in step."""
        self._store = store

    async def append(self, event: WorkflowEvent) -> dict[str, Any] | None:
        """Record one event; returns what was written (redacted), or None for a duplicate."""
        record = event.to_dict()  # a duplicate is dropped by `record` below
        if self.redactor is not None:
            record = self.redactor.redact_obj(record)
            record["event_id"] = event.event_id  # the id is ours: never blank it
        store = self._store
        if store is not None and event.task_id:
            record["detail_file"] = self._relative(store.detail_location(event.task_id))
        if not await self.log.record(record):
            return None  # recorded meanwhile (another coroutine, or another node)
        if store is not None and event.task_id:
            await store.append_detail(event.task_id, _detail_line(record), at=event.at)
            if not event.agent_id:
                await self._sync_status(store, event.task_id, record)
        if self.hub is not None:
            self.hub.publish(HUB_KIND, record)
        return record

    async def emit_task_event(self, event: TaskEvent) -> None:
        """The runner's `emit` callback: task steps become workflow events."""
        await self.append(WorkflowEvent.from_task_event(event))

    def recent(self, count: int = 50, *, task_id: str | None = None) -> list[dict[str, Any]]:
        """The last `count` events (of one task when `task_id` is given), read from the end."""
        if task_id is None:
            return self.log.recent(count)
        records = [r for r in self.log.recent(max(count * 20, 500))
                   if r.get("task_id") == task_id]
        return records[-count:]

    async def close(self) -> None:
        await self.log.close()

    async def _sync_status(self, store: TaskStore, task_id: str,
                           record: dict[str, Any]) -> None:
        status = record.get("payload", {}).get("status")
        if status in {s.value for s in TaskStatus}:
            await set_status(store, task_id, TaskStatus(status),
                             str(record.get("summary", "")))

    def _relative(self, location: Path | str) -> str:
        if self.workspace is None or not isinstance(location, Path):
            return str(location)
        return os.path.relpath(location, self.workspace)


def _detail_line(record: dict[str, Any]) -> str:
    who = f" {record['agent_id']}" if record.get("agent_id") else ""
    summary = " ".join(str(record.get("summary", "")).split())
    return f"**{record['phase']}**{who}: {summary}"
