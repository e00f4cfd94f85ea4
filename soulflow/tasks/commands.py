"""`/task list | show ID | cancel ID` in any chat, answered from the TaskStore without the model.

A chat sees its own tasks (admins may name any task by id). Cancelling is for the person who
asked for the task or an admin, the same rule as approvals.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from soulflow.backends.base import TaskStore
from soulflow.tasks.answers import fetch_required
from soulflow.tasks.model import NodeStatus, TaskDecisionError, TaskState
from soulflow.tasks.runner import EmitFn, cancel_idle_task

TASK_USAGE = "Usage: /task list | /task show ID | /task cancel ID"
LIST_LIMIT = 10
SHOW_DETAIL_LINES = 6

CancelFn = Callable[[str, str], Awaitable[TaskState]]  # (task_id, by) -> task
IsAdminFn = Callable[[str, str], bool]  # (provider, user_id) -> admin?


class _Command(Protocol):
    args: str


class _Message(Protocol):
    provider: str
    chat_id: str
    sender_id: str


def idle_canceller(store: TaskStore, emit: EmitFn | None = None) -> CancelFn:
    """`cancel` for a daemon without a TaskEngine running graphs: nothing runs, so cancelling
    records the task (and its waiting or interrupted nodes) as cancelled."""

    async def cancel(task_id: str, by: str) -> TaskState:
        return await cancel_idle_task(await fetch_required(store, task_id), store, emit=emit,
                                      by=by)

    return cancel


def make_task_command(store: TaskStore, cancel: CancelFn,
                      is_admin: IsAdminFn) -> Callable[[Any, Any], Awaitable[str]]:
    """The `/task` handler for the channel command router."""

    def visible(task: TaskState | None, message: _Message) -> bool:
        if task is None:
            return False
        here = task.provider == message.provider and task.chat_id == message.chat_id
        return here or is_admin(message.provider, message.sender_id)

    async def handle(command: _Command, message: _Message) -> str:
        words = command.args.split()
        if not words or words[0] == "list":
            return list_text(await store.fetch_list(provider=message.provider,
                                                    chat_id=message.chat_id))
        if len(words) != 2 or words[0] not in ("show", "cancel"):
            return TASK_USAGE
        task = await store.fetch(words[1])
        if task is None or not visible(task, message):
            return f"There is no task {words[1]} in this chat."
        if words[0] == "show":
            return show_text(task, await store.fetch_detail_tail(task.task_id,
                                                                 SHOW_DETAIL_LINES))
        if task.requested_by not in ("", message.sender_id) and not is_admin(
                message.provider, message.sender_id):
            return f"Only the person who asked for task {task.task_id} or an admin can cancel it."
        try:
            task = await cancel(task.task_id, message.sender_id)
        except TaskDecisionError as exc:
            return f"Could not cancel: {exc}."
        return f"Task {task.task_id} is {task.status.value}."

    return handle


def _progress(task: TaskState) -> str:
    done = sum(s.status in (NodeStatus.COMPLETED, NodeStatus.SKIPPED)
               for s in task.nodes.values())
    return f"{done}/{len(task.nodes)} steps done"


def list_text(tasks: list[TaskState]) -> str:
    if not tasks:
        return "No tasks in this chat."
    lines = [f"• {t.task_id} {t.status.value}: {t.title} ({_progress(t)})"
             for t in tasks[:LIST_LIMIT]]
    more = f"\n…and {len(tasks) - LIST_LIMIT} older" if len(tasks) > LIST_LIMIT else ""
    return "Tasks in this chat:\n" + "\n".join(lines) + more


def show_text(task: TaskState, recent: list[str]) -> str:
    """`/task show`: the task's steps and its story's last lines (`recent`)."""
    lines = [f"Task {task.task_id}: {task.title}", f"Status: {task.status.value} "
             f"({_progress(task)})"]
    if task.error:
        lines.append(f"Error: {task.error}")
    for node in task.graph.nodes:
        state = task.nodes[node.id]
        text = state.summary or state.error
        lines.append(f"• {node.id} ({node.kind.value}) {state.status.value}"
                     + (f": {_short(text)}" if text else f" - {_short(node.label())}"))
    for waiting in task.waiting:
        lines.append(f"Waiting on {waiting['node_id']} ({waiting['reason']}): "
                     f"{_short(str(waiting.get('prompt', '')))}")
    if recent:
        lines.append("Recent:")
        lines.extend(recent)
    return "\n".join(lines)


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"
