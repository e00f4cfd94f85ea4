"""What changes a stored task from outside its runner: a person's answer to a waiting node
(`decide`) and a status a workflow event carries (`set_status`); `require` for the lookups that
must find the task.

These are the task rules, apart from the store that keeps the result (`backends/base.py`
`TaskStore`, files or Redis): which choices a node takes, what a status change does to the
task. The answer is checkpointed through the store before anyone acts on it, so an approval
given just before a crash still continues the task.
"""

from __future__ import annotations

from soulflow.backends.base import TaskStore
from soulflow.tasks.model import (
    Choice,
    NodeKind,
    NodeStatus,
    TaskDecisionError,
    TaskState,
    TaskStatus,
)

__all__ = ["decide", "require", "set_status"]


def require(store: TaskStore, task_id: str) -> TaskState:
    """The task, or `TaskDecisionError` naming the missing id."""
    return _found(store.get(task_id), task_id)


async def fetch_required(store: TaskStore, task_id: str) -> TaskState:
    """`require` for the daemon's loops and commands (`TaskStore.fetch`: not on the event
    loop)."""
    return _found(await store.fetch(task_id), task_id)


def _found(task: TaskState | None, task_id: str) -> TaskState:
    if task is None:
        raise TaskDecisionError(f"there is no task {task_id}")
    return task


async def set_status(store: TaskStore, task_id: str, status: TaskStatus,
                     reason: str = "") -> bool:
    """Set a task's status from outside the runner (workflow events); False if unchanged."""
    task = await store.fetch(task_id)
    if task is None or task.status is status:
        return False
    task.status = status
    if reason and status in (TaskStatus.FAILED, TaskStatus.CANCELLED):
        task.error = reason
    await store.checkpoint(task)
    return True


async def decide(store: TaskStore, task_id: str, node_id: str, choice: Choice | str,
                 by: str = "") -> TaskState:
    """Record the user's answer on a waiting node (checkpointed before anyone acts on it)."""
    task = await fetch_required(store, task_id)
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
    await store.record_answer(task)
    return task
