"""`TaskEngine`: owns the running tasks of one daemon (submit, decide, cancel, resume at boot).

Each running task is one named asyncio task (`task-run-<id>`) that the engine supervises: an
unexpected crash of the loop itself is logged and the task marked failed, never left looking
alive. `stop()` cancels them without marking anything, so the next `start()` resumes them from
their checkpoints; `cancel()` is the user's cancel and ends the task `cancelled`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection

from soulflow.supervisor import cancel_and_wait
from soulflow.tasks.graph import validate_graph
from soulflow.tasks.model import Choice, TaskGraph, TaskState, TaskStatus
from soulflow.tasks.runner import (
    DEFAULT_MAX_PARALLEL,
    EmitFn,
    NodeExecutors,
    cancel_idle_task,
    run_task_loop,
)
from soulflow.tasks.store import TaskDecisionError, TaskStore, new_task_id

log = logging.getLogger(__name__)


class TaskEngine:
    """Runs tasks through `run_task_loop`, at most one loop per task at a time."""

    def __init__(self, store: TaskStore, executors: NodeExecutors, *,
                 tool_names: Collection[str] | None = None, emit: EmitFn | None = None,
                 max_parallel: int = DEFAULT_MAX_PARALLEL) -> None:
        self.store = store
        self.executors = executors
        self.tool_names = tool_names
        self.emit = emit
        self.max_parallel = max_parallel
        self._loops: dict[str, asyncio.Task[None]] = {}
        self._aborts: dict[str, asyncio.Event] = {}
        self._wakes: dict[str, asyncio.Event] = {}

    async def start(self) -> list[str]:
        """Resume every task that was `running` at the last checkpoint; returns their ids.

        `waiting_approval` tasks keep waiting: they continue when someone decides, or now if
        an answer was recorded just before the process died.
        """
        resumed = [t.task_id for t in self.store.unfinished()
                   if t.status is TaskStatus.RUNNING
                   or any(s.choice is not None for s in t.nodes.values())]
        for task_id in resumed:
            self._spawn(task_id)
        return resumed

    async def stop(self) -> None:
        """Stop every loop without marking anything (resumed by the next `start`)."""
        await cancel_and_wait(self._loops.values())
        self._loops.clear()
        self._aborts.clear()
        self._wakes.clear()

    async def submit(self, graph: TaskGraph, *, title: str, provider: str = "",
                     chat_id: str = "", thread_id: str | None = None, requested_by: str = "",
                     task_id: str | None = None) -> TaskState:
        """Validate `graph` (raises `GraphValidationError`), store the task and start it."""
        validate_graph(graph, self.tool_names)
        task = TaskState(task_id=task_id or new_task_id(), title=title, graph=graph,
                         provider=provider, chat_id=chat_id, thread_id=thread_id,
                         requested_by=requested_by)
        await self.store.add(task)
        self._spawn(task.task_id)
        return task

    async def decide(self, task_id: str, node_id: str, choice: Choice | str,
                     by: str = "") -> TaskState:
        """Record the answer (checkpointed first), then continue the task."""
        task = await self.store.decide(task_id, node_id, choice, by)
        wake = self._wakes.get(task_id)
        if wake is not None:
            wake.set()  # the running loop applies it at once (other branches keep running)
        else:
            self._spawn(task_id)
        return task

    async def cancel(self, task_id: str, by: str = "") -> TaskState:
        """The user's cancel: a running loop cancels its nodes; a waiting task ends at once."""
        task = self.store.require(task_id)
        if task.status.finished:
            raise TaskDecisionError(f"task {task_id} is already {task.status.value}")
        abort = self._aborts.get(task_id)
        loop = self._loops.get(task_id)
        if abort is not None and loop is not None:
            abort.set()
            await asyncio.gather(loop, return_exceptions=True)
            if by and task.status is TaskStatus.CANCELLED:
                task.error = f"cancelled by {by}"
                await self.store.checkpoint(task)
            return task
        return await cancel_idle_task(task, self.store, emit=self.emit, by=by)

    def running_ids(self) -> list[str]:
        return list(self._loops)

    async def wait(self, task_id: str) -> TaskState:
        """Until the task's current loop returns (finished or waiting)."""
        loop = self._loops.get(task_id)
        if loop is not None:
            await asyncio.gather(loop, return_exceptions=True)
        return self.store.require(task_id)

    def _spawn(self, task_id: str) -> None:
        if task_id in self._loops:
            return  # the running loop picks up decisions when it next looks
        abort, wake = asyncio.Event(), asyncio.Event()
        self._aborts[task_id], self._wakes[task_id] = abort, wake
        loop = asyncio.create_task(self._drive(task_id, abort, wake), name=f"task-run-{task_id}")
        self._loops[task_id] = loop
        loop.add_done_callback(lambda _: self._forget(task_id, loop))

    def _forget(self, task_id: str, loop: asyncio.Task[None]) -> None:
        if self._loops.get(task_id) is not loop:
            return
        del self._loops[task_id]
        self._aborts.pop(task_id, None)
        self._wakes.pop(task_id, None)
        task = self.store.get(task_id)
        if (not loop.cancelled() and task is not None
                and not task.status.finished
                and any(s.choice is not None for s in task.nodes.values())):
            self._spawn(task_id)  # a decision arrived while the loop was finishing

    async def _drive(self, task_id: str, abort: asyncio.Event, wake: asyncio.Event) -> None:
        task = self.store.require(task_id)
        try:
            await run_task_loop(task, self.store, self.executors, emit=self.emit,
                                max_parallel=self.max_parallel, abort=abort, wake=wake)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in the loop: say so on the task, never hang it
            log.exception("the loop of task %s crashed", task_id)
            task.status, task.error = TaskStatus.FAILED, f"internal error: {exc!r}"
            await self.store.checkpoint(task)
