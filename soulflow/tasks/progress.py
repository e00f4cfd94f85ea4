"""Progress of running tasks in their chat: short updates, approval prompts and the final result.

Updates are rate-limited per task (at most one per `interval_s`; what happens in between is
folded into the next one, sent by a delayed flush) so a graph of many quick steps does not
flood the chat. Prompts for a person (a gate, a tool call needing approval, a step interrupted
by a restart) and the final result are sent at once. Everything goes through the outbox (the
`publish` callback), so it is journaled and retried like any reply; a failure to publish is
logged and never touches the task.

Messages announcing a prompt carry `task_id` and `node_id` in their metadata: the daemon
remembers the platform message ids they got, so a reaction on them decides the prompt.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from soulflow.tasks.contracts import TaskEvent
from soulflow.tasks.model import NodeStatus, TaskState, TaskStatus

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 3.0
RESULT_CHARS = 3000

PublishFn = Callable[[dict[str, Any], str, dict[str, Any]], None]  # (chat, text, metadata)


def chat_of_task(task: TaskState) -> dict[str, Any]:
    return {"provider": task.provider, "chat_id": task.chat_id, "thread_id": task.thread_id}


class TaskProgress:
    """Turns task events into chat messages (see the module docstring)."""

    def __init__(self, publish: PublishFn, *, interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.publish = publish
        self.interval_s = interval_s
        self.clock = clock
        self._last_sent: dict[str, float] = {}
        self._pending: dict[str, str] = {}
        self._flushers: dict[str, asyncio.Task[None]] = {}

    async def on_event(self, event: TaskEvent) -> None:
        task = event.task
        if not task.chat_id:
            return
        if event.node_id is None:
            if event.phase == "done" and task.status.finished:
                self._drop_pending(task.task_id)
                self._send(task, final_text(task))
            return
        reason = event.payload.get("reason")
        if event.phase == "blocked" and reason in ("approval", "interrupted"):
            self._send(task, prompt_text(task, event.node_id, str(reason)),
                       {"task_id": task.task_id, "node_id": event.node_id})
        elif event.phase in ("assign", "done"):
            self._update(task, status_text(task, event))

    async def close(self) -> None:
        """Cancel delayed flushes (their updates are superseded by the next start's)."""
        flushers = list(self._flushers.values())
        for flusher in flushers:
            flusher.cancel()
        if flushers:
            await asyncio.gather(*flushers, return_exceptions=True)
        self._flushers.clear()

    # -- rate limiting ---------------------------------------------------------------------

    def _update(self, task: TaskState, text: str) -> None:
        last = self._last_sent.get(task.task_id)
        now = self.clock()
        if last is None or now - last >= self.interval_s:
            self._send(task, text)
            return
        self._pending[task.task_id] = text
        if task.task_id not in self._flushers:
            delay = self.interval_s - (now - last)
            flusher = asyncio.create_task(self._flush_later(task, delay),
                                          name=f"task-progress-{task.task_id}")
            self._flushers[task.task_id] = flusher
            flusher.add_done_callback(lambda _: self._flushers.pop(task.task_id, None))

    async def _flush_later(self, task: TaskState, delay: float) -> None:
        await asyncio.sleep(delay)
        text = self._pending.pop(task.task_id, None)
        if text is not None and not task.status.finished:
            self._send(task, text)

    def _drop_pending(self, task_id: str) -> None:
        self._pending.pop(task_id, None)
        flusher = self._flushers.pop(task_id, None)
        if flusher is not None:
            flusher.cancel()

    def _send(self, task: TaskState, text: str, metadata: dict[str, Any] | None = None) -> None:
        self._last_sent[task.task_id] = self.clock()
        if task.status.finished:
            self._last_sent.pop(task.task_id, None)
        try:
            self.publish(chat_of_task(task), text, metadata or {})
        except Exception:  # progress is best effort: the task goes on
            log.exception("could not post progress of task %s", task.task_id)


def status_text(task: TaskState, event: TaskEvent) -> str:
    done = sum(s.status in (NodeStatus.COMPLETED, NodeStatus.SKIPPED)
               for s in task.nodes.values())
    running = [n.label() for n in task.graph.nodes
               if task.nodes[n.id].status is NodeStatus.RUNNING]
    text = f"⏳ Task {task.task_id} ({task.title}): {done}/{len(task.nodes)} steps done"
    if running:
        text += "; running: " + ", ".join(_clip(r, 60) for r in running[:3])
    return text


def prompt_text(task: TaskState, node_id: str, reason: str) -> str:
    node = task.graph.node(node_id)
    state = task.nodes[node_id]
    if reason == "interrupted":
        return (f"Task {task.task_id} ({task.title}): step {node_id} ({_clip(node.label(), 80)})"
                " was interrupted by a restart while running and may have had an effect "
                "already.\nReply retry (run it again), mark done (its effect happened; carry "
                f"on) or deny (stop the task), optionally with {task.task_id}.")
    prompt = (state.approval or {}).get("reason") or node.prompt or node.label()
    return (f"Task {task.task_id} ({task.title}) waits for approval at step {node_id}: "
            f"{prompt}\nReply approve or deny (or react ✅ / ❌), optionally with "
            f"{task.task_id}.")


def final_text(task: TaskState) -> str:
    if task.status is TaskStatus.COMPLETED:
        return f"✅ Task {task.task_id} ({task.title}) is done.\n\n{result_text(task)}".strip()
    if task.status is TaskStatus.CANCELLED:
        return f"Task {task.task_id} ({task.title}) was cancelled" + (
            f": {task.error}." if task.error else ".")
    return f"Task {task.task_id} ({task.title}) ended {task.status.value}: {task.error}"


def result_text(task: TaskState) -> str:
    """The task's answer: the outputs of its last steps (text as is, anything else as JSON)."""
    result = task.result if isinstance(task.result, dict) else {}
    parts = []
    for node_id, output in result.items():
        text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False,
                                                                 default=str)
        parts.append(text if len(result) == 1 else f"{node_id}: {text}")
    return _clip("\n\n".join(parts), RESULT_CHARS, keep_lines=True)


def _clip(text: str, limit: int, *, keep_lines: bool = False) -> str:
    if not keep_lines:
        text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"
