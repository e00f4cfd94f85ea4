"""`TaskStore`: every task's checkpoint in `runtime/tasks/store.json`, plus per-task detail logs.

The file is replaced atomically after every node (write temp, fsync, rename), so a `kill -9`
leaves the previous or the next checkpoint, never half of one. A store that cannot be read is
moved aside to `store.json.corrupt-<ts>` and reported in `problems` (and the log): starting from
an empty store silently would forget tasks waiting for someone's approval.

Approvals go through the store (`decide`): the answer is checkpointed on the waiting node before
anything acts on it, so an approval given just before a crash still continues the task.

`TaskStoreBase` is what the engine, the runner, the chat and the dashboard use; `TaskStore` keeps
it in files (the default), `soulflow/backends/redis/tasks.py` in Redis for several nodes. A store
that may only write tasks whose chat this node holds raises `TaskFenced` for the others.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

from soulflow.storage.append import append_text
from soulflow.storage.atomic import quarantine, write_bytes_atomic
from soulflow.tasks.model import Choice, NodeKind, NodeStatus, TaskState, TaskStatus, now

log = logging.getLogger(__name__)

STORE_VERSION = 1
KEEP_FINISHED = 500  # finished tasks kept in store.json (their detail logs stay on disk)
_TASK_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_DETAIL_TAIL_BYTES = 8192


class TaskDecisionError(ValueError):
    """A decision that does not apply (unknown task or node, nothing waiting, wrong choice)."""


class TaskFenced(TaskDecisionError):
    """This node may not write the task: the partition of its chat is held by another node (or
    by none, or this node's hold on it lapsed), so the node that holds it runs the task. A
    runner that gets this stops at once without marking anything; a decision or cancel made
    here is refused with this message (answer in the task's chat instead)."""


def _encode_task(record: Any) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)


def new_task_id() -> str:
    return "t-" + secrets.token_hex(4)


def task_chat_key(task: TaskState) -> str:
    """The chat a task belongs to (`provider:chat_id`): the node holding it runs the task."""
    return f"{task.provider}:{task.chat_id}"


def detail_entry(line: str, at: float | None = None) -> str:
    """One line of a task's story as stored: `- <local time> <text>`."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now() if at is None else at))
    return f"- {stamp} {line.strip()}"


class TaskStoreBase(ABC):
    """The store's API: reading tasks, checkpointing them, answers, and each task's story.

    A task object returned for a task this node may run is the live one its runner mutates;
    `checkpoint` records its current state.
    """

    problems: list[str]

    @abstractmethod
    def get(self, task_id: str) -> TaskState | None: ...

    @abstractmethod
    def list(self, *, status: TaskStatus | None = None, chat_id: str | None = None,
             provider: str | None = None, limit: int | None = None) -> list[TaskState]:
        """Tasks newest first, optionally only one status or one chat, at most `limit`."""

    @abstractmethod
    def unfinished(self, *, chats: Callable[[str], bool] | None = None) -> list[TaskState]:
        """Tasks still running or waiting, oldest first; with `chats`, only those whose chat
        key it accepts (the engine's "chats this node holds": cheap to ask every second)."""

    @abstractmethod
    async def add(self, task: TaskState) -> None:
        """Store a new task (ValueError for a bad or existing id)."""

    @abstractmethod
    async def checkpoint(self, task: TaskState) -> None:
        """Record `task`'s current state durably (raises `TaskFenced` where not allowed)."""

    @abstractmethod
    def detail_location(self, task_id: str) -> Path | str:
        """Where the task's story is kept (a file, or a Redis key), for the events' field."""

    @abstractmethod
    def append_detail(self, task_id: str, line: str, *, at: float | None = None) -> Path | str:
        """Append one line of the task's story; returns `detail_location(task_id)`."""

    @abstractmethod
    def detail_tail(self, task_id: str, count: int) -> list[str]:
        """The last `count` lines of the task's story (`- <time> <text>`), oldest first."""

    async def record_answer(self, task: TaskState) -> None:
        """Record a person's answer, or a cancel, on a task no loop drives here (`decide`, and
        cancelling an idle task). A checkpoint here; on Redis it may also come from a node that
        does not hold the task's chat, for a task that waits (backends/redis/tasks.py)."""
        await self.checkpoint(task)

    def count_unfinished(self) -> int:
        """How many tasks are running or waiting (for /api/state: cheap on every store)."""
        return len(self.unfinished())

    def require(self, task_id: str) -> TaskState:
        task = self.get(task_id)
        if task is None:
            raise TaskDecisionError(f"there is no task {task_id}")
        return task

    async def set_status(self, task_id: str, status: TaskStatus, reason: str = "") -> bool:
        """Set a task's status from outside the runner (workflow events); False if unchanged."""
        task = self.get(task_id)
        if task is None or task.status is status:
            return False
        task.status = status
        if reason and status in (TaskStatus.FAILED, TaskStatus.CANCELLED):
            task.error = reason
        await self.checkpoint(task)
        return True

    async def decide(self, task_id: str, node_id: str, choice: Choice | str,
                     by: str = "") -> TaskState:
        """Record the user's answer on a waiting node (checkpointed before anyone acts on it)."""
        task = self.require(task_id)
        if task.status.finished:
            raise TaskDecisionError(f"task {task_id} is already {task.status.value}")
        if node_id not in task.nodes:
            raise TaskDecisionError(f"task {task_id} has no node {node_id}")
        try:
            choice = Choice(choice)
        except ValueError:
            raise TaskDecisionError(f"unknown choice {choice!r}") from None
        state = task.nodes[node_id]
        node = task.graph.node(node_id)
        if state.status is NodeStatus.WAITING_APPROVAL and (
                node.kind is NodeKind.APPROVAL or state.approval is not None):
            allowed = {Choice.APPROVE, Choice.DENY}
        elif state.status is NodeStatus.INTERRUPTED:
            allowed = {Choice.RETRY, Choice.MARK_DONE, Choice.DENY}
        else:
            raise TaskDecisionError(f"node {node_id} of task {task_id} is {state.status.value}, "
                                    f"nothing to decide")
        if choice not in allowed:
            names = ", ".join(sorted(c.value for c in allowed))
            raise TaskDecisionError(f"node {node_id} takes one of: {names}")
        state.choice = choice.value
        state.decided_by = by
        await self.record_answer(task)
        return task


def check_task_id(task_id: str) -> None:
    if not _TASK_ID_RE.fullmatch(task_id):
        raise ValueError(f"bad task id {task_id!r}")


class TaskStore(TaskStoreBase):
    """Tasks in memory (the live objects runners mutate) and their checkpoints on disk."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / "store.json"
        self.details_dir = directory / "details"
        self.problems: list[str] = []
        self._tasks: dict[str, TaskState] = {}
        # each task's last checkpoint as compact JSON; records we could not parse stay here
        # (written back as they were) without a TaskState
        self._encoded: dict[str, str] = {}
        self._write_lock = asyncio.Lock()
        self._load()

    # -- loading -------------------------------------------------------------------------

    def _load(self) -> None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        try:
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict) or not isinstance(data.get("tasks"), dict):
                raise ValueError("not a task store (no 'tasks' object)")
            version = data.get("version")
            if version != STORE_VERSION:
                raise ValueError(f"store version {version!r}, this SoulFlow reads "
                                 f"{STORE_VERSION}")
        except (UnicodeDecodeError, ValueError) as exc:
            moved = quarantine(self.path, str(exc))
            self.problems.append(f"the task store was unreadable ({exc}); it was moved aside to "
                                 f"{moved.name} and tasks start empty")
            return
        for task_id, record in data["tasks"].items():
            self._encoded[task_id] = _encode_task(record)
            try:
                self._tasks[task_id] = TaskState.from_dict(record)
            except (KeyError, TypeError, ValueError) as exc:
                self.problems.append(f"task {task_id} could not be read ({exc!r}); it is kept "
                                     f"in the store untouched")
                log.error("task %s in %s could not be read: %r", task_id, self.path, exc)

    # -- reading -------------------------------------------------------------------------

    def get(self, task_id: str) -> TaskState | None:
        return self._tasks.get(task_id)

    def list(self, *, status: TaskStatus | None = None, chat_id: str | None = None,
             provider: str | None = None, limit: int | None = None) -> list[TaskState]:
        found = [
            t for t in self._tasks.values()
            if (status is None or t.status is status)
            and (chat_id is None or t.chat_id == chat_id)
            and (provider is None or t.provider == provider)
        ]
        return sorted(found, key=lambda t: t.created_at, reverse=True)[:limit]

    def unfinished(self, *, chats: Callable[[str], bool] | None = None) -> list[TaskState]:
        return [t for t in self._tasks.values() if not t.status.finished
                and (chats is None or chats(task_chat_key(t)))]

    # -- writing -------------------------------------------------------------------------

    async def add(self, task: TaskState) -> None:
        check_task_id(task.task_id)
        if task.task_id in self._encoded:
            raise ValueError(f"task {task.task_id} already exists")
        self._tasks[task.task_id] = task
        await self.checkpoint(task)

    async def checkpoint(self, task: TaskState) -> None:
        """Record `task`'s current state on disk; returns once the rename is durable.

        Only this task is serialised on the event loop (a snapshot consistent with what the
        runner holds); the file is assembled from every task's last snapshot and written in a
        thread, so a store of hundreds of tasks costs the loop one task's encoding. The lock
        keeps writes in order, so an older file never replaces a newer one; a caller cancelled
        while waiting still leaves the file whole (the write is atomic).
        """
        task.revision += 1
        task.updated_at = now()
        self._encoded[task.task_id] = _encode_task(task.to_dict())
        self._prune()
        async with self._write_lock:
            parts = list(self._encoded.items())  # under the lock: the newest lands last
            await asyncio.to_thread(self._write, parts)

    def _write(self, parts: list[tuple[str, str]]) -> None:
        body = ",\n".join(f"{json.dumps(task_id)}: {text}" for task_id, text in parts)
        text = f'{{"version": {STORE_VERSION}, "tasks": {{\n{body}\n}}}}\n'
        write_bytes_atomic(self.path, text.encode("utf-8"))

    def _prune(self) -> None:
        """Forget the oldest finished tasks beyond KEEP_FINISHED (their detail logs stay)."""
        finished = [t for t in self._tasks.values() if t.status.finished]
        if len(finished) <= KEEP_FINISHED:
            return
        finished.sort(key=lambda t: t.updated_at)
        for old in finished[:-KEEP_FINISHED]:
            del self._tasks[old.task_id]
            del self._encoded[old.task_id]

    # -- detail logs ---------------------------------------------------------------------

    def detail_path(self, task_id: str) -> Path:
        check_task_id(task_id)
        return self.details_dir / f"{task_id}.md"

    def detail_location(self, task_id: str) -> Path:
        return self.detail_path(task_id)

    def append_detail(self, task_id: str, line: str, *, at: float | None = None) -> Path:
        """Append one line of the task's human-readable story (one write, O_APPEND)."""
        path = self.detail_path(task_id)
        task = self._tasks.get(task_id)
        append_text(path, detail_entry(line, at) + "\n",
                    header=f"# Task {task_id}: {task.title if task else ''}\n\n")
        return path

    def detail_tail(self, task_id: str, count: int) -> list[str]:
        """Read from the end of the file (it only grows): its last 8 KiB hold the lines."""
        try:
            with open(self.detail_path(task_id), "rb") as handle:
                size = handle.seek(0, 2)
                handle.seek(max(0, size - _DETAIL_TAIL_BYTES))
                tail = handle.read().decode("utf-8", "replace")
        except (FileNotFoundError, ValueError):
            return []
        return [line for line in tail.splitlines() if line.startswith("- ")][-count:]
