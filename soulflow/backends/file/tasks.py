"""The tasks on files: every task's checkpoint in `runtime/tasks/store.json`, plus per-task
detail logs (`runtime/tasks/details/<task_id>.md`, the task's story).

The file is replaced atomically after every node (write temp, fsync, rename), so a `kill -9`
leaves the previous or the next checkpoint, never half of one. A store that cannot be read is
moved aside to `store.json.corrupt-<ts>` and reported in `problems` (and the log): starting from
an empty store silently would forget tasks waiting for someone's approval.

Approvals go through the store (`tasks/answers.py` `decide`): the answer is checkpointed on the
waiting node before anything acts on it, so an approval given just before a crash still
continues the task.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from soulflow.backends import base
from soulflow.storage.append import append_text
from soulflow.storage.atomic import quarantine, write_bytes_atomic
from soulflow.tasks.model import (
    TaskState,
    TaskStatus,
    check_task_id,
    detail_entry,
    now,
    task_chat_key,
)

log = logging.getLogger(__name__)

STORE_VERSION = 1
_DETAIL_TAIL_BYTES = 8192


def _encode_task(record: Any) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)


class FileTaskStore:
    """`TaskStore` in files: tasks in memory (the live objects runners mutate) and their
    checkpoints on disk."""

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

    async def fetch(self, task_id: str) -> TaskState | None:
        """`get`: the tasks are in memory."""
        return self.get(task_id)

    async def fetch_list(self, *, chat_id: str, provider: str) -> list[TaskState]:
        return self.list(chat_id=chat_id, provider=provider)

    async def fetch_detail_tail(self, task_id: str, count: int) -> list[str]:
        return self.detail_tail(task_id, count)

    async def fetch_unfinished(self, *,
                               chats: Callable[[str], bool] | None = None) -> list[TaskState]:
        return self.unfinished(chats=chats)

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

    def count_unfinished(self) -> int:
        return len(self.unfinished())

    # -- writing -------------------------------------------------------------------------

    async def add(self, task: TaskState) -> None:
        check_task_id(task.task_id)
        if task.task_id in self._encoded:
            raise ValueError(f"task {task.task_id} already exists")
        self._tasks[task.task_id] = task
        await self.checkpoint(task)

    async def record_answer(self, task: TaskState) -> None:
        """One node: an answer is a checkpoint like any other."""
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
        if len(finished) <= base.KEEP_FINISHED:
            return
        finished.sort(key=lambda t: t.updated_at)
        for old in finished[:-base.KEEP_FINISHED]:
            del self._tasks[old.task_id]
            del self._encoded[old.task_id]

    # -- detail logs ---------------------------------------------------------------------

    def detail_path(self, task_id: str) -> Path:
        check_task_id(task_id)
        return self.details_dir / f"{task_id}.md"

    def detail_location(self, task_id: str) -> Path:
        return self.detail_path(task_id)

    async def append_detail(self, task_id: str, line: str, *,
                            at: float | None = None) -> Path:
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
