"""Workflow events: the durable story of tasks and runs, shown live on the dashboard.

Each event is one line of `runtime/events/events.jsonl` (fields `event_id, run_id, task_id,
agent_id, phase, summary, payload, provider, channel, chat_id, thread_id, source, detail_file,
at`; `phase` is one of assign, progress, blocked, done, approval). Appending one:

1. redacts it (the `Redactor`), since events reach a file, the dashboard and the browser;
2. records it in the log unless its `event_id` was recorded before. The file log
   (`FileWorkflowLog`) appends through the storage JSONL path (one write per line, torn lines
   repaired) and keeps the ids in `runtime/events/index.json`, rebuilt from the journal's tail
   at boot, so a crash between the two writes cannot let a replay through. On Redis
   (`soulflow/backends/redis/events.py`) the dedupe and the append are one script, so two nodes
   replaying the same step record it once;
3. when a task store is bound (`bind_task_store`): appends a line to the task's detail log
   (`runtime/tasks/details/<task_id>.md`, or its Redis list) and keeps the task's status in
   step with task-level events that carry a status;
4. publishes it to the EventHub as kind `workflow`, which the dashboard's SSE stream shows.

`provider` is the chat platform (as everywhere in SoulFlow) and `channel` the channel instance
that carries it (today the same name; kept apart for several accounts on one platform).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from soulflow.events.hub import EventHub
from soulflow.security.redact import Redactor
from soulflow.storage.atomic import read_json, write_json_atomic
from soulflow.storage.jsonl import JsonlFile
from soulflow.tasks.model import TaskStatus
from soulflow.tasks.runner import TaskEvent
from soulflow.tasks.store import TaskStoreBase

PHASES = ("assign", "progress", "blocked", "done", "approval")
INDEX_VERSION = 1
DEFAULT_INDEX_SIZE = 10_000  # event ids remembered for dedupe
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


class WorkflowLog(Protocol):
    """Where events are kept: append with dedupe by `event_id`, read the newest back."""

    def seen(self, event_id: str) -> bool: ...

    async def record(self, record: dict[str, Any]) -> bool:
        """Append `record` unless its `event_id` was recorded before (then False)."""

    def recent(self, count: int) -> list[dict[str, Any]]:
        """The last `count` records, oldest first."""

    async def close(self) -> None: ...


class FileWorkflowLog:
    """`events.jsonl` plus `index.json` (the last `index_size` ids) in one directory."""

    def __init__(self, directory: Path, *, index_size: int = DEFAULT_INDEX_SIZE,
                 fsync: str = "interval") -> None:
        self.index_size = index_size
        self.journal = JsonlFile(directory / "events.jsonl", fsync=fsync)
        self.index_path = directory / "index.json"
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._index_dirty = False
        self._index_lock = asyncio.Lock()
        self._load_index()

    def _load_index(self) -> None:
        data = read_json(self.index_path, {})  # unreadable: moved aside, rebuilt from the tail
        ids = data.get("ids", []) if isinstance(data, dict) else []
        for event_id in ids:
            self._remember(str(event_id))
        for record in self.journal.tail(self.index_size):
            if isinstance(record.get("event_id"), str):
                self._remember(record["event_id"])

    def _remember(self, event_id: str) -> None:
        self._seen[event_id] = None
        self._seen.move_to_end(event_id)
        while len(self._seen) > self.index_size:
            self._seen.popitem(last=False)

    def seen(self, event_id: str) -> bool:
        return event_id in self._seen

    async def record(self, record: dict[str, Any]) -> bool:
        event_id = str(record["event_id"])
        if event_id in self._seen:
            return False
        self._remember(event_id)  # before any await: a concurrent duplicate is dropped
        self.journal.append(record)
        self._index_dirty = True
        await self._write_index()
        return True

    def recent(self, count: int) -> list[dict[str, Any]]:
        return self.journal.tail(count)

    async def close(self) -> None:
        await self._write_index()
        await asyncio.to_thread(self.journal.close)

    async def _write_index(self) -> None:
        """Write index.json off the loop; concurrent callers share one write."""
        async with self._index_lock:
            if not self._index_dirty:
                return
            self._index_dirty = False
            data = {"version": INDEX_VERSION, "ids": list(self._seen)}
            await asyncio.to_thread(write_json_atomic, self.index_path, data, indent=None)


class WorkflowEventService:
    """Appends, dedupes, redacts and publishes workflow events; see the module docstring.

    `log` is where events are kept; without one, the files in `directory`."""

    def __init__(self, directory: Path | None = None, *, workspace: Path | None = None,
                 redactor: Redactor | None = None, hub: EventHub | None = None,
                 index_size: int = DEFAULT_INDEX_SIZE, fsync: str = "interval",
                 log: WorkflowLog | None = None) -> None:
        if log is None:
            if directory is None:
                raise ValueError("a WorkflowEventService needs a directory or a log")
            log = FileWorkflowLog(directory, index_size=index_size, fsync=fsync)
        self.log = log
        self.workspace = workspace
        self.redactor = redactor
        self.hub = hub
        self._store: TaskStoreBase | None = None

    def seen(self, event_id: str) -> bool:
        return self.log.seen(event_id)

    def bind_task_store(self, store: TaskStoreBase) -> None:
        """From now on events write the task's detail log and keep its status in step."""
        self._store = store

    async def append(self, event: WorkflowEvent) -> dict[str, Any] | None:
        """Record one event; returns what was written (redacted), or None for a duplicate."""
        if self.log.seen(event.event_id):
            return None
        record = event.to_dict()
        if self.redactor is not None:
            record = self.redactor.redact_obj(record)
            record["event_id"] = event.event_id  # the id is ours: never blank it
        store = self._store
        if store is not None and event.task_id:
            record["detail_file"] = self._relative(store.detail_location(event.task_id))
        if not await self.log.record(record):
            return None  # recorded meanwhile (another coroutine, or another node)
        if store is not None and event.task_id:
            store.append_detail(event.task_id, _detail_line(record), at=event.at)
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

    async def _sync_status(self, store: TaskStoreBase, task_id: str,
                           record: dict[str, Any]) -> None:
        status = record.get("payload", {}).get("status")
        if status in {s.value for s in TaskStatus}:
            await store.set_status(task_id, TaskStatus(status), str(record.get("summary", "")))

    def _relative(self, location: Path | str) -> str:
        if self.workspace is None or not isinstance(location, Path):
            return str(location)
        return os.path.relpath(location, self.workspace)


def _detail_line(record: dict[str, Any]) -> str:
    who = f" {record['agent_id']}" if record.get("agent_id") else ""
    summary = " ".join(str(record.get("summary", "")).split())
    return f"**{record['phase']}**{who}: {summary}"
