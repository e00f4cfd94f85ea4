"""`TaskEngine`: owns the running tasks of one daemon (submit, decide, cancel, resume at boot).

Each running task is one named asyncio task (`task-run-<id>`) that the engine supervises: an
unexpected crash of the loop itself is logged and the task marked failed, never left looking
alive. `stop()` cancels them without marking anything, so the next `start()` resumes them from
their checkpoints; `cancel()` is the user's cancel and ends the task `cancelled`.

A task belongs to its chat. With several nodes on one Redis, the engine runs only tasks whose
chat this node holds (`owns`, the partition leases of docs/scaling.md): `reconcile()`, called
when the held partitions change and every few seconds by `watch()`, stops the loops of tasks
whose chat moved away (nothing marked, as at shutdown) and resumes the unfinished tasks of chats
it now holds, by the same rules as a restart. The store refuses a checkpoint from a node that
does not hold the chat (`TaskFenced`), so two nodes never drive one task past a checkpoint.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection

from soulflow.backends.base import Offload, TaskStore, call_here
from soulflow.errors import StoreUnavailable
from soulflow.supervisor import cancel_and_wait
from soulflow.tasks.answers import decide, fetch_required
from soulflow.tasks.graph import validate_graph
from soulflow.tasks.model import (
    Choice,
    TaskDecisionError,
    TaskFenced,
    TaskGraph,
    TaskState,
    TaskStatus,
    new_task_id,
    task_chat_key,
)
from soulflow.tasks.runner import (
    DEFAULT_MAX_PARALLEL,
    EmitFn,
    NodeExecutors,
    cancel_idle_task,
    run_task_loop,
)

log = logging.getLogger(__name__)

OwnsFn = Callable[[str], bool]  # chat key (`provider:chat_id`) -> does this node run its work?


def _everywhere(chat_key: str) -> bool:
    return True


class TaskEngine:
    """Runs tasks through `run_task_loop`, at most one loop per task at a time."""

    def __init__(self, store: TaskStore, executors: NodeExecutors, *,
                 tool_names: Collection[str] | None = None, emit: EmitFn | None = None,
                 max_parallel: int = DEFAULT_MAX_PARALLEL, owns: OwnsFn = _everywhere,
                 offload: Offload = call_here) -> None:
        self.store = store
        self._offload = offload  # the periodic reads, off the event loop (Backend.offload)
        self.executors = executors
        self.tool_names = tool_names
        self.emit = emit
        self.max_parallel = max_parallel
        self.owns = owns
        self._loops: dict[str, asyncio.Task[None]] = {}
        self._aborts: dict[str, asyncio.Event] = {}
        self._wakes: dict[str, asyncio.Event] = {}
        self._chats: dict[str, str] = {}  # task id -> chat key, for the running loops
        self._rechecks: set[asyncio.Task[None]] = set()  # `_resume_if_decided`
        self._changed = asyncio.Event()
        self._watch_failing = False

    async def start(self) -> list[str]:
        """Resume every task that was `running` at the last checkpoint; returns their ids.

        `waiting_approval` tasks keep waiting: they continue when someone decides, or now if
        an answer was recorded just before the process died. Only tasks of chats this node
        holds are resumed (all of them with one node).
        """
        return await self._resume_owned()

    async def _resume_owned(self) -> list[str]:
        unfinished = await self._offload(self.store.unfinished, chats=self.owns)
        resumed = [t for t in unfinished
                   if t.task_id not in self._loops
                   and (t.status is TaskStatus.RUNNING
                        or any(s.choice is not None for s in t.nodes.values()))]
        for task in resumed:
            self._spawn(task)
        return [t.task_id for t in resumed]

    async def reconcile(self) -> list[str]:
        """Follow the chats this node holds: stop the loops of tasks whose chat moved away
        (nothing is marked; the new holder recovers them from the checkpoint) and resume the
        tasks of chats held now. Returns the ids resumed."""
        lost = [task_id for task_id, chat in self._chats.items() if not self.owns(chat)]
        if lost:
            log.warning("task(s) %s: their chats are handled by another node now; stopping "
                        "them here", ", ".join(lost))
            await cancel_and_wait([self._loops[t] for t in lost if t in self._loops])
        return await self._resume_owned()

    def partitions_changed(self) -> None:
        """Callback for the backend: the chats this node holds changed; reconcile soon."""
        self._changed.set()

    async def watch(self, interval_s: float) -> None:
        """Reconcile when told (`partitions_changed`) and every `interval_s` (a callback can be
        missed while Redis is away); a supervised loop of the daemon on Redis. Logs one line
        per change between failing and working, not one per try."""
        while True:
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=interval_s)
            except TimeoutError:
                pass
            self._changed.clear()
            try:
                resumed = await self.reconcile()
            except Exception as exc:  # Redis away: the store's reads fail; try again later
                if not self._watch_failing:
                    log.warning("tasks: cannot check which tasks to run here (%s); retrying",
                                exc)
                self._watch_failing = True
                continue
            if self._watch_failing:
                log.info("tasks: checking which tasks to run here works again")
            self._watch_failing = False
            if resumed:
                log.info("resumed %d task(s) of chats now handled here: %s", len(resumed),
                         ", ".join(resumed))

    async def stop(self) -> None:
        """Stop every loop without marking anything (resumed by the next `start`)."""
        await cancel_and_wait([*self._loops.values(), *self._rechecks])
        self._loops.clear()
        self._aborts.clear()
        self._wakes.clear()
        self._chats.clear()

    async def submit(self, graph: TaskGraph, *, title: str, provider: str = "",
                     chat_id: str = "", thread_id: str | None = None, requested_by: str = "",
                     task_id: str | None = None) -> TaskState:
        """Validate `graph` (raises `GraphValidationError`), store the task and start it."""
        validate_graph(graph, self.tool_names)
        task = TaskState(task_id=task_id or new_task_id(), title=title, graph=graph,
                         provider=provider, chat_id=chat_id, thread_id=thread_id,
                         requested_by=requested_by)
        await self.store.add(task)
        self._spawn(task)
        return task

    async def decide(self, task_id: str, node_id: str, choice: Choice | str,
                     by: str = "") -> TaskState:
        """Record the answer (checkpointed first), then continue the task."""
        task = await decide(self.store, task_id, node_id, choice, by)
        if not self.owns(task_chat_key(task)):
            return task  # recorded; the node holding the chat runs it (next `reconcile`)
        wake = self._wakes.get(task_id)
        if wake is not None:
            wake.set()  # the running loop applies it at once (other branches keep running)
        else:
            self._spawn(task)
        return task

    async def cancel(self, task_id: str, by: str = "") -> TaskState:
        """The user's cancel: a running loop cancels its nodes; a waiting task ends at once."""
        task = await fetch_required(self.store, task_id)
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

    def running_chats(self) -> set[str]:
        """Chat keys of the tasks whose loops run here (their partitions stay here)."""
        return set(self._chats.values())

    async def wait(self, task_id: str) -> TaskState:
        """Until the task's current loop returns (finished or waiting)."""
        loop = self._loops.get(task_id)
        if loop is not None:
            await asyncio.gather(loop, return_exceptions=True)
        return await fetch_required(self.store, task_id)

    def _spawn(self, task: TaskState) -> None:
        task_id = task.task_id
        if task_id in self._loops:
            return  # the running loop picks up decisions when it next looks
        abort, wake = asyncio.Event(), asyncio.Event()
        self._aborts[task_id], self._wakes[task_id] = abort, wake
        self._chats[task_id] = task_chat_key(task)
        loop = asyncio.create_task(self._drive(task_id, abort, wake), name=f"task-run-{task_id}")
        self._loops[task_id] = loop
        loop.add_done_callback(lambda _: self._forget(task_id, loop))

    def _forget(self, task_id: str, loop: asyncio.Task[None]) -> None:
        if self._loops.get(task_id) is not loop:
            return
        del self._loops[task_id]
        self._aborts.pop(task_id, None)
        self._wakes.pop(task_id, None)
        chat = self._chats.pop(task_id, "")
        if loop.cancelled() or not self.owns(chat):
            return
        recheck = asyncio.create_task(self._resume_if_decided(task_id),
                                      name=f"task-recheck-{task_id}")
        self._rechecks.add(recheck)
        recheck.add_done_callback(self._rechecks.discard)

    async def _resume_if_decided(self, task_id: str) -> None:
        """A decision that arrived while the task's loop was finishing runs it again; the
        task is read in the store thread (`offload`), not on the event loop."""
        try:
            task = await self.store.fetch(task_id)
        except StoreUnavailable:
            return  # `reconcile` resumes it once the store answers
        if (task is not None and not task.status.finished
                and any(s.choice is not None for s in task.nodes.values())):
            self._spawn(task)

    async def _drive(self, task_id: str, abort: asyncio.Event, wake: asyncio.Event) -> None:
        try:
            task = await fetch_required(self.store, task_id)
        except StoreUnavailable as exc:
            log.warning("task %s paused: %s", task_id, exc)
            return
        try:
            await run_task_loop(task, self.store, self.executors, emit=self.emit,
                                max_parallel=self.max_parallel, abort=abort, wake=wake)
        except asyncio.CancelledError:
            raise
        except TaskFenced as exc:  # its chat is another node's now: that node resumes it
            log.warning("task %s stops on this node: %s", task_id, exc)
        except StoreUnavailable as exc:  # resumed by `reconcile` once the store answers
            log.warning("task %s paused: %s", task_id, exc)
        except Exception as exc:  # a bug in the loop: say so on the task, never hang it
            log.exception("the loop of task %s crashed", task_id)
            task.status, task.error = TaskStatus.FAILED, f"internal error: {exc!r}"
            try:
                await self.store.checkpoint(task)
            except (TaskFenced, StoreUnavailable):
                log.warning("task %s: its failure could not be recorded here (its chat is "
                            "another node's now)", task_id)
