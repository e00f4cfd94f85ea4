"""Progress of running tasks in their chat: a status message, approval prompts, the final result.

Where the platform can edit a sent message (`ChannelAdapter.can_edit`: Slack chat.update,
Telegram editMessageText, Discord message edit) a task has ONE status message: the first update
is posted through the outbox, and later ones edit it in place (the adapter's best-effort
client; a failed edit is logged and the next update tries again; an edit the platform refused
with a retry_after is tried again after that wait, unless a newer update replaces it first, so
the message does not stay behind when the refused edit was the last). Elsewhere (the local chat)
each update is a short message. Either way updates are rate-limited per task (at most one per
`interval_s`; what happens in between is folded into the next one, sent by a delayed flush, a
named asyncio task per task) so a graph of many quick steps does not flood the chat. Prompts for
a person (a gate, a tool call needing approval, a step interrupted by a restart) and the final
result are posted at once, as ordinary replies through the outbox (journaled and retried); a
failure to publish is logged and never touches the task. The status message's id lives in
memory: after a restart the next update posts a new status message.

Messages announcing a prompt carry the step they ask about (`TaskStepRef`), the status message
its task (`TaskStatusRef`): the daemon remembers the platform message ids they got, so a
reaction on a prompt decides it and a later update edits the status message.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable

from soulflow.channels.base import ChannelAdapter
from soulflow.contracts import Announcement, ChatRef, SendError, TaskStatusRef, TaskStepRef
from soulflow.supervisor import cancel_and_wait
from soulflow.tasks.contracts import TaskEvent
from soulflow.tasks.model import NodeStatus, TaskState, TaskStatus

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 3.0
MIN_QUEUED_WAIT_S = 0.2  # between looks at a status message still in the outbox
MAX_QUEUED_WAITS = 20  # then it is taken as lost and the next update posts a new one
RESULT_CHARS = 3000

PublishFn = Callable[[ChatRef, str, Announcement | None], None]  # (chat, text, announces)
EditorFn = Callable[[str], ChannelAdapter | None]  # provider -> its adapter, if it can edit


def chat_of_task(task: TaskState) -> ChatRef:
    return ChatRef(task.provider, task.chat_id, task.thread_id)


class TaskProgress:
    """Turns task events into chat messages (see the module docstring)."""

    def __init__(self, publish: PublishFn, *, interval_s: float = DEFAULT_INTERVAL_S,
                 editor: EditorFn | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.publish = publish
        self.interval_s = interval_s
        self.editor = editor or (lambda provider: None)
        self.clock = clock
        self._last_sent: dict[str, float] = {}
        self._pending: dict[str, str] = {}
        self._flushers: dict[str, asyncio.Task[None]] = {}
        self._retry_at: dict[str, float] = {}  # task id -> clock() a refused edit may retry
        # task id -> the status message's platform id; None while its first send is queued
        self._status: dict[str, str | None] = {}

    async def on_event(self, event: TaskEvent) -> None:
        task = event.task
        if not task.chat_id:
            return
        if event.node_id is None:
            if event.phase == "done" and task.status.finished:
                self._drop_pending(task.task_id)
                self._status.pop(task.task_id, None)
                self._send(task, final_text(task))
            return
        reason = event.payload.get("reason")
        if event.phase == "blocked" and reason in ("approval", "interrupted"):
            self._send(task, prompt_text(task, event.node_id, str(reason)),
                       TaskStepRef(task.task_id, event.node_id))
        elif event.phase in ("assign", "done"):
            self._update(task, status_text(task, event))

    def status_sent(self, task_id: str, platform_ids: list[str]) -> None:
        """The outbox delivered a task's status message: later updates edit it."""
        if task_id in self._status and platform_ids:
            self._status[task_id] = platform_ids[0]

    async def stop(self) -> None:
        """Cancel delayed flushes (their updates are superseded by the next start's)."""
        await cancel_and_wait(self._flushers.values())
        self._flushers.clear()

    # -- rate limiting ---------------------------------------------------------------------

    def _update(self, task: TaskState, text: str) -> None:
        """Keep the newest text; one flusher per task sends it when the interval allows."""
        self._pending[task.task_id] = text
        running = self._flushers.get(task.task_id)
        # a flusher that has ended (its done callback may not have run yet) sends nothing more
        if running is not None and not running.done():
            return
        flusher = asyncio.create_task(self._flush(task), name=f"task-progress-{task.task_id}")
        self._flushers[task.task_id] = flusher
        flusher.add_done_callback(lambda done: self._forget(task.task_id, done))

    def _forget(self, task_id: str, flusher: asyncio.Task[None]) -> None:
        if self._flushers.get(task_id) is flusher:  # not a newer one started meanwhile
            del self._flushers[task_id]

    async def _flush(self, task: TaskState) -> None:
        task_id = task.task_id
        queued_waits = 0
        while task_id in self._pending and not task.status.finished:
            last = self._last_sent.get(task_id)
            wait = 0.0 if last is None else self.interval_s - (self.clock() - last)
            wait = max(wait, self._retry_at.pop(task_id, 0.0) - self.clock())
            await asyncio.sleep(max(0.0, wait))
            if self._status.get(task_id, "") is None:  # the status message is still queued
                queued_waits += 1
                if queued_waits > MAX_QUEUED_WAITS:  # never delivered: post a new one
                    self._status.pop(task_id, None)
                await asyncio.sleep(max(self.interval_s, MIN_QUEUED_WAIT_S))
                continue
            text = self._pending.pop(task_id, None)
            if text is not None and not task.status.finished:
                await self._deliver(task, text)

    async def _deliver(self, task: TaskState, text: str) -> None:
        adapter = self.editor(task.provider)
        message_id = self._status.get(task.task_id)
        if adapter is None or not adapter.can_edit:
            self._send(task, text)
            return
        if message_id is None:
            self._status[task.task_id] = None
            self._send(task, text, TaskStatusRef(task.task_id))
            return
        self._last_sent[task.task_id] = self.clock()
        try:
            await adapter.edit(task.chat_id, message_id, text)
        except Exception as exc:  # best effort: the next update tries again
            log.info("could not edit the status message of task %s: %s", task.task_id, exc)
            if isinstance(exc, SendError) and exc.retry_after is not None and not exc.permanent:
                # rate-limited: this text again after the wait (a newer one wins meanwhile)
                self._pending.setdefault(task.task_id, text)
                self._retry_at[task.task_id] = self.clock() + exc.retry_after

    def _drop_pending(self, task_id: str) -> None:
        self._pending.pop(task_id, None)
        self._retry_at.pop(task_id, None)
        flusher = self._flushers.pop(task_id, None)
        if flusher is not None:
            flusher.cancel()

    def _send(self, task: TaskState, text: str, announces: Announcement | None = None) -> None:
        self._last_sent[task.task_id] = self.clock()
        if task.status.finished:
            self._last_sent.pop(task.task_id, None)
        try:
            self.publish(chat_of_task(task), text, announces)
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
