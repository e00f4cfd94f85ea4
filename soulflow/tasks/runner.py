"""`run_task_loop`: runs a task's graph to its end, or until it has to wait for someone.

One call drives the task as far as it can: it recovers nodes left mid-flight by a crash, applies
the user's recorded answers, then starts every ready node (bounded by `max_parallel`), injects
each result into its dependents' inputs, follows conditional edges, and checkpoints the task in
the `TaskStore` before and after every node. It returns when the task is finished or waiting
(an approval gate, or an interrupted node the user must decide on); a later call resumes it.

Two ways to stop, deliberately different:
- the `abort` event (user `/stop`, `/task cancel`): running nodes are cancelled and the task ends
  `cancelled`;
- cancelling the coroutine (daemon shutdown): nothing is marked, so running nodes are still
  `running` in the checkpoint and the next boot recovers them like after a crash. A checkpoint
  refused with `TaskFenced` (several nodes on Redis: the task's chat is held elsewhere now) stops
  the loop the same way, and the node that holds the chat recovers the task.

Recovery re-runs a node that was mid-flight only when it is idempotent (a tool node: its tool
is; an agent node: every tool it may use is); otherwise it becomes `interrupted` and waits for
`retry`, `mark_done` or `deny`, so a side effect is never repeated behind the user's back.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from jsonschema import Draft202012Validator

from soulflow.backends.base import TaskStore
from soulflow.errors import StoreUnavailable
from soulflow.tasks.contracts import EmitFn, NodeCall, NodeExecutors, TaskEvent
from soulflow.tasks.graph import propagate_skips, ready_nodes, resolve_inputs
from soulflow.tasks.model import (
    Choice,
    NodeKind,
    NodeOutcome,
    NodeStatus,
    OutcomeStatus,
    TaskDecisionError,
    TaskFenced,
    TaskNode,
    TaskState,
    TaskStatus,
    now,
)

log = logging.getLogger(__name__)

DEFAULT_MAX_PARALLEL = 4

__all__ = [  # the contracts are re-exported: callers import the engine from one place
    "EmitFn", "NodeExecutors", "TaskEvent", "cancel_idle_task", "mark_cancelled", "run_task_loop",
]


async def run_task_loop(task: TaskState, store: TaskStore, executors: NodeExecutors, *,
                        emit: EmitFn | None = None, max_parallel: int = DEFAULT_MAX_PARALLEL,
                        abort: asyncio.Event | None = None,
                        wake: asyncio.Event | None = None) -> TaskState:
    """Drive `task` until it is finished or waiting; returns it (also checkpointed).

    `wake` is set by whoever records a decision while the loop runs other branches, so the
    answer is applied at once instead of when the next node finishes.
    """
    if max_parallel < 1:
        raise ValueError("max_parallel must be at least 1")
    run = _TaskRun(task, store, executors, emit, max_parallel, abort or asyncio.Event(),
                   wake or asyncio.Event())
    await run.run()
    return task


def mark_cancelled(task: TaskState, by: str = "") -> None:
    """Every node that could still run becomes `cancelled`, and so does the task."""
    for state in task.nodes.values():
        if state.status in (NodeStatus.RUNNING, NodeStatus.PENDING,
                            NodeStatus.WAITING_APPROVAL, NodeStatus.INTERRUPTED):
            state.status, state.finished_at, state.choice = NodeStatus.CANCELLED, now(), None
    task.status, task.waiting = TaskStatus.CANCELLED, []
    task.error = f"cancelled by {by}" if by else ""


async def cancel_idle_task(task: TaskState, store: TaskStore, *, emit: EmitFn | None = None,
                           by: str = "") -> TaskState:
    """Cancel a task no loop is driving (waiting for someone, or not resumed since a crash).

    Needs no executors: nothing runs, so there is nothing to stop, only states to record.
    """
    if task.status.finished:
        raise TaskDecisionError(f"task {task.task_id} is already {task.status.value}")
    mark_cancelled(task, by)
    await store.record_answer(task)
    summary = "task cancelled" + (f" by {by}" if by else "")
    await _send_event(emit, TaskEvent(task, "done", summary, f"{task.task_id}:task:cancelled",
                                      None, {"status": TaskStatus.CANCELLED.value, "by": by}))
    return task


async def _send_event(emit: EmitFn | None, event: TaskEvent) -> None:
    """Hand `event` to the sink; a broken sink must not stop the task, so it is only logged."""
    if emit is None:
        return
    try:
        await emit(event)
    except Exception:
        log.exception("workflow event for task %s failed", event.task.task_id)


class _TaskRun:
    """One pass of the loop over one task; all state changes happen on this coroutine (node
    coroutines only compute outcomes), so the task object never sees two writers."""

    def __init__(self, task: TaskState, store: TaskStore, executors: NodeExecutors,
                 emit: EmitFn | None, max_parallel: int, abort: asyncio.Event,
                 wake: asyncio.Event) -> None:
        self.task = task
        self.store = store
        self.executors = executors
        self._emit_fn = emit
        self.max_parallel = max_parallel
        self.abort = abort
        self.wake = wake
        self.running: dict[asyncio.Task[NodeOutcome], str] = {}
        self.stopping = False
        self._pending: list[TaskEvent] = []  # events waiting for the next checkpoint

    async def run(self) -> None:
        if self.task.status.finished:
            return
        self.task.status = TaskStatus.RUNNING
        self.task.waiting = []
        if not self.abort.is_set():  # a cancel needs no recovery: nothing will run again
            await self._recover()
        abort_wait = asyncio.ensure_future(self.abort.wait())
        wake_wait: asyncio.Future[Any] | None = None
        try:
            while True:
                if self.abort.is_set():
                    await self._cancel_all()
                    return
                self.wake.clear()
                await self._apply_choices()
                await self._launch_ready()
                if not self.running:
                    break
                if wake_wait is None or wake_wait.done():
                    wake_wait = asyncio.ensure_future(self.wake.wait())
                done, _ = await asyncio.wait({*self.running, abort_wait, wake_wait},
                                             return_when=asyncio.FIRST_COMPLETED)
                for child in [c for c in self.running if c in done]:
                    if self.abort.is_set():
                        break  # a step that ended because of the cancel is cancelled, not failed
                    await self._record(self.running.pop(child), child)
        except (asyncio.CancelledError, TaskFenced, StoreUnavailable):
            # shutdown, the task's chat moved to another node (a checkpoint was refused), or
            # the store is away: stop the steps, mark nothing; the checkpoint says where to
            # pick up
            await self._shutdown_children()
            raise
        finally:
            abort_wait.cancel()
            if wake_wait is not None:
                wake_wait.cancel()
        await self._finish()

    # -- recovery and decisions ------------------------------------------------------------

    async def _recover(self) -> None:
        """Nodes still `running` in the checkpoint were cut off by a crash or a shutdown."""
        changed = False
        for node in self.task.graph.nodes:
            state = self.task.nodes[node.id]
            if state.status is not NodeStatus.RUNNING:
                continue
            changed = True
            if self.executors.idempotent(node):
                state.status = NodeStatus.PENDING
                self._emit_later("progress", f"{node.id} was cut off; it is idempotent, "
                                 f"running it again", node.id, f"rerun:{state.attempts}")
            else:
                state.status = NodeStatus.INTERRUPTED
                state.error = "interrupted by a restart while running; not safe to re-run alone"
                self._emit_later("blocked", f"{node.id} was interrupted mid-flight; "
                                 f"waiting for the user (retry, mark_done or deny)",
                                 node.id, f"interrupted:{state.attempts}",
                                 {"reason": "interrupted"})
        if changed:
            await self._checkpoint()
            await self._flush_emits()

    async def _apply_choices(self) -> None:
        changed = False
        for node in self.task.graph.nodes:
            state = self.task.nodes[node.id]
            if state.choice is None:
                continue
            choice, by = Choice(state.choice), state.decided_by or "the user"
            state.choice = None
            changed = True
            routed = any(edge.source == node.id for edge in self.task.graph.conditions)
            if node.kind is not NodeKind.APPROVAL and state.approval is not None \
                    and choice in (Choice.APPROVE, Choice.DENY):
                # a tool call inside the node waited: it runs again with the answer (a tool
                # node's denial ends it; an agent is told and carries on without the call)
                state.approval = {**state.approval, "decision": choice.value, "by": by}
                if choice is Choice.DENY and node.kind is NodeKind.TOOL:
                    state.status, state.finished_at = NodeStatus.FAILED, now()
                    state.error = state.summary = f"denied by {by}"
                else:
                    state.status, state.error = NodeStatus.PENDING, ""
            elif choice is Choice.APPROVE:
                self._complete(state, {"approved": True, "by": by}, f"approved by {by}",
                               "approved")
            elif choice is Choice.RETRY:
                state.status, state.error = NodeStatus.PENDING, ""
            elif choice is Choice.MARK_DONE:
                self._complete(state, None, f"marked done by {by}", None)
            elif node.kind is NodeKind.APPROVAL and routed:
                self._complete(state, {"approved": False, "by": by}, f"denied by {by}",
                               "denied")
            else:
                state.status, state.finished_at = NodeStatus.FAILED, now()
                state.error = state.summary = f"denied by {by}"
            self._emit_later("approval", f"{node.id}: {choice.value} by {by}", node.id,
                             f"choice:{state.attempts}:{choice.value}",
                             {"choice": choice.value, "by": by})
        if changed:
            await self._checkpoint()
            await self._flush_emits()

    @staticmethod
    def _complete(state: Any, output: Any, summary: str, route: str | None) -> None:
        state.status, state.output, state.summary = NodeStatus.COMPLETED, output, summary
        state.route, state.error, state.finished_at = route, "", now()

    # -- running nodes ---------------------------------------------------------------------

    async def _launch_ready(self) -> None:
        propagate_skips(self.task)
        if self.stopping:
            return
        launched: list[TaskNode] = []
        gates: list[TaskNode] = []
        for node in ready_nodes(self.task):
            state = self.task.nodes[node.id]
            if node.kind is NodeKind.APPROVAL:
                state.status = NodeStatus.WAITING_APPROVAL
                gates.append(node)
            elif len(self.running) + len(launched) < self.max_parallel:
                state.status, state.started_at, state.finished_at = NodeStatus.RUNNING, now(), None
                state.attempts += 1
                launched.append(node)
        if not launched and not gates:
            return
        await self._checkpoint()
        for node in gates:
            await self._emit("blocked", f"waiting for approval: {node.prompt or node.label()}",
                             node.id, f"gate:{self.task.nodes[node.id].attempts}",
                             {"prompt": node.prompt or node.label(), "reason": "approval"})
        for node in launched:
            state = self.task.nodes[node.id]
            child = asyncio.create_task(self._execute(node),
                                        name=f"task-{self.task.task_id}-{node.id}")
            self.running[child] = node.id
            await self._emit("assign", f"started {node.id}: {node.label()}", node.id,
                             f"assign:{state.attempts}", {"kind": node.kind.value})

    async def _execute(self, node: TaskNode) -> NodeOutcome:
        inputs = resolve_inputs(self.task, node)
        state = self.task.nodes[node.id]
        call = NodeCall(self.task, node, state.attempts,
                        dict(state.approval) if state.approval is not None else None)
        try:
            if node.kind is NodeKind.AGENT:
                outcome = await self.executors.run_agent(node.goal, list(node.tools), inputs,
                                                         self.abort, call=call)
            else:
                params = {**node.params, **inputs}
                outcome = await self.executors.run_tool(node.tool, params, self.abort,
                                                        call=call)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an executor bug fails the node, never the whole engine
            log.exception("node %s of task %s raised", node.id, self.task.task_id)
            return NodeOutcome.failed(f"{type(exc).__name__}: {exc}")
        if not isinstance(outcome, NodeOutcome):
            return NodeOutcome.failed(f"the executor returned {type(outcome).__name__}, "
                                      f"not a NodeOutcome")
        if outcome.status is OutcomeStatus.COMPLETED and node.output_schema is not None:
            errors = sorted(Draft202012Validator(node.output_schema).iter_errors(outcome.output),
                            key=lambda e: list(e.path))
            if errors:
                return NodeOutcome.failed("the output does not match its schema: "
                                          + "; ".join(e.message for e in errors[:3]))
        return outcome

    async def _record(self, node_id: str, child: asyncio.Task[NodeOutcome]) -> None:
        state = self.task.nodes[node_id]
        outcome = child.result()
        state.finished_at = now()
        state.summary, state.route, state.error = outcome.summary, outcome.route, outcome.error
        state.approval = None
        if outcome.status is OutcomeStatus.NEEDS_APPROVAL:
            state.status, state.finished_at = NodeStatus.WAITING_APPROVAL, None
            state.approval = {**(outcome.output or {}), "reason": outcome.summary}
            await self._checkpoint()
            await self._emit("blocked", f"{node_id} waits for approval: {outcome.summary}",
                             node_id, f"needs-approval:{state.attempts}",
                             {"prompt": outcome.summary, "reason": "approval"})
            return
        if outcome.status is OutcomeStatus.COMPLETED:
            state.status, state.output = NodeStatus.COMPLETED, outcome.output
        elif outcome.status is OutcomeStatus.MAX_TURNS_REACHED:
            state.status, self.stopping = NodeStatus.MAX_TURNS_REACHED, True
        else:
            state.status, self.stopping = NodeStatus.FAILED, True
        skipped = propagate_skips(self.task)
        await self._checkpoint()
        payload: dict[str, Any] = {"status": state.status.value, "route": outcome.route,
                                   "started_at": state.started_at,
                                   "finished_at": state.finished_at}
        if skipped:
            payload["skipped"] = skipped
        text = outcome.summary or outcome.error
        summary = f"{node_id} {state.status.value}" + (f": {text}" if text else "")
        await self._emit("done", summary, node_id, f"done:{state.attempts}", payload)

    # -- endings ---------------------------------------------------------------------------

    async def _finish(self) -> None:
        task = self.task
        statuses = {s.status for s in task.nodes.values()}
        failed = [n for n in task.graph.nodes if task.nodes[n.id].status is NodeStatus.FAILED]
        if failed:
            first = failed[0]
            denied = first.kind is NodeKind.APPROVAL or task.nodes[first.id].error.startswith(
                "denied by")
            task.status = TaskStatus.CANCELLED if denied else TaskStatus.FAILED
            task.error = f"{first.id}: {task.nodes[first.id].error}"
        elif NodeStatus.MAX_TURNS_REACHED in statuses:
            task.status = TaskStatus.MAX_TURNS_REACHED
            task.error = "a node reached its turn limit"
        elif statuses & {NodeStatus.WAITING_APPROVAL, NodeStatus.INTERRUPTED}:
            task.status = TaskStatus.WAITING_APPROVAL
            task.waiting = [entry for n in task.graph.nodes
                            if (entry := task.nodes[n.id].waiting_entry(n)) is not None]
        else:
            task.status = TaskStatus.COMPLETED
            task.result = self._result()
        await self._checkpoint()
        phase = "blocked" if task.status is TaskStatus.WAITING_APPROVAL else "done"
        await self._emit(phase, f"task {task.status.value}" + (f": {task.error}"
                         if task.error else ""), None, f"{task.status.value}:{task.revision}",
                         {"status": task.status.value, "waiting": task.waiting})

    def _result(self) -> dict[str, Any]:
        """Outputs of the completed nodes nothing depends on (the task's answer)."""
        deps = self.task.graph.dependencies()
        used = {d for node_deps in deps.values() for d in node_deps}
        return {n.id: self.task.nodes[n.id].output for n in self.task.graph.nodes
                if n.id not in used and self.task.nodes[n.id].status is NodeStatus.COMPLETED}

    async def _cancel_all(self) -> None:
        """User cancel: stop running nodes, mark everything unsettled cancelled."""
        await self._shutdown_children()
        mark_cancelled(self.task)
        await self._checkpoint()
        await self._emit("done", "task cancelled", None, "cancelled",
                         {"status": TaskStatus.CANCELLED.value})

    async def _shutdown_children(self) -> None:
        for child in self.running:
            child.cancel()
        if self.running:
            await asyncio.gather(*self.running, return_exceptions=True)
        self.running.clear()

    # -- persistence and events ------------------------------------------------------------

    async def _checkpoint(self) -> None:
        await asyncio.shield(self.store.checkpoint(self.task))

    def _emit_later(self, phase: str, summary: str, node_id: str | None, key: str,
                    payload: dict[str, Any] | None = None) -> None:
        """Queue an event that must wait for the next checkpoint."""
        self._pending.append(TaskEvent(self.task, phase, summary, self._key(node_id, key),
                                       node_id, payload or {}))

    async def _flush_emits(self) -> None:
        pending, self._pending = self._pending, []
        for event in pending:
            await _send_event(self._emit_fn, event)

    async def _emit(self, phase: str, summary: str, node_id: str | None, key: str,
                    payload: dict[str, Any] | None = None) -> None:
        event = TaskEvent(self.task, phase, summary, self._key(node_id, key), node_id,
                          payload or {})
        await _send_event(self._emit_fn, event)

    def _key(self, node_id: str | None, key: str) -> str:
        """Event id: task, node (or `task`) and step; equal only for a replay of one step."""
        return f"{self.task.task_id}:{node_id or 'task'}:{key}"
