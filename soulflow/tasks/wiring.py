"""Wiring of task graphs into a Runtime: store, workflow events, engine, executors, chat, tool.

Kept out of runtime/daemon.py (which calls `TaskServices(runtime)`, `start`, `stop` and
`state`) so the daemon's boot file stays about boot order. The engine starts after the agent
(its nodes are agent runs) and stops before it; stopping leaves running nodes `running` in the
checkpoint, and the next start resumes them (docs/tasks.md, "Checkpoints and restarts").
The services are built before the conversation, which is given them as its `ChatTasks`
(soulflow/conversation/chat_tasks.py: task replies and reactions in chats, /stop cancelling a
chat's tasks) and `/task` among its commands.

The stores are the backend's (the task store, its plans under review, the workflow events and
the task prompts' messages: files under runtime/, or Redis, where a task is written only under
the lease of its chat's partition). When other nodes share the work, the engine follows the
partitions this node holds (the "tasks:ownership" loop): tasks of chats that come to this node
resume here, those of chats that leave stop here (docs/scaling.md, "Tasks").
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from soulflow.agent.approvals import Decider, parse_reaction
from soulflow.agent.run.reducer import RunState
from soulflow.agent.tools.base import ToolContext
from soulflow.bus.messages import InboundMessage, OutboundMessage, SendResult
from soulflow.contracts import Announcement, ChatRef, TaskStatusRef, TaskStepRef
from soulflow.events.workflow import WorkflowEvent, WorkflowEventService
from soulflow.tasks.chat import TaskChat
from soulflow.tasks.contracts import TaskEvent
from soulflow.tasks.engine import TaskEngine
from soulflow.tasks.executors import AgentParts, DaemonExecutors, is_task_run
from soulflow.tasks.planner import Planner
from soulflow.tasks.progress import TaskProgress
from soulflow.tasks.tool import TaskTool

if TYPE_CHECKING:
    from soulflow.runtime import Runtime

__all__ = ["TaskServices", "is_task_run"]

log = logging.getLogger(__name__)


class TaskServices:
    """Everything tasks need in one daemon (see the module docstring)."""

    def __init__(self, runtime: Runtime) -> None:
        settings = runtime.settings
        self._runtime = runtime
        backend = runtime.backend
        self.store = backend.tasks
        self.workflow = WorkflowEventService(backend.workflow, workspace=settings.workspace,
                                             redactor=runtime.redactor, hub=runtime.hub)
        self.proposals = backend.proposals  # plans under review, one per chat
        # platform message ids of task prompts, so a reaction decides them
        self.prompts = backend.task_prompts
        for problem in self.store.problems:
            log.error("task store: %s", problem)
        self.workflow.bind_task_store(self.store)
        agent: AgentParts | None = None
        model = runtime.model
        if runtime.runs is not None and model is not None:
            agent = AgentParts(runtime.runs, lambda: model, runtime.context.system_prompt,
                               runtime.tool_bridge.context, int(settings["AGENT_MAX_TURNS"]))
        self.executors = DaemonExecutors(runtime.tools, self._tool_context, agent,
                                         redactor=runtime.redactor)
        self.progress = TaskProgress(self._publish, editor=runtime.channels.get,
                                     interval_s=float(settings["TASK_PROGRESS_INTERVAL_S"]))
        self.engine = TaskEngine(self.store, self.executors.executors(),
                                 tool_names=self.executors.tool_names(), emit=self._emit,
                                 max_parallel=int(settings["TASK_MAX_PARALLEL"]),
                                 owns=runtime.backend.owns)
        self.approvers = runtime.agent.approvers  # tasks follow the run approvals' rule
        self.chat = TaskChat(self.engine, self.executors, self._planner, self.proposals,
                             self.approvers, agent_waiting=self._agent_waiting)
        runtime.tools.register(TaskTool(lambda: self.chat, self._publish_text))
        runtime.bus.dispatcher.sent_listeners.append(self._remember_prompt)

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> list[str]:
        """After the backend started (Redis: this node holds its first partitions)."""
        runtime = self._runtime
        backend = runtime.backend
        # a chat with a task running here is work in hand: a node joining the cluster must
        # not interrupt a task mid-step (it moves when its loop has finished or waits)
        backend.hold_chats(self.engine.running_chats)
        backend.on_partitions_changed(self.engine.partitions_changed)
        if backend.shared:
            # a lost partition must stop its tasks here well within the third of a TTL
            # between this node's lease deadline and the lease's expiry in Redis
            interval = float(runtime.settings["REDIS_LEASE_TTL_S"]) / 8
            runtime.supervisor.spawn("tasks:ownership", lambda: self.engine.watch(interval))
        resumed = await self.engine.start()
        if resumed:
            log.info("resumed %d task(s) from their checkpoints: %s", len(resumed),
                     ", ".join(resumed))
        return resumed

    async def stop(self) -> None:
        await self.engine.stop()
        await self.chat.close()
        await self.progress.close()

    def state(self) -> dict[str, Any]:
        """For /api/state; `unfinished` is None while the store does not answer (Redis away:
        the backend's own status says so)."""
        try:
            unfinished: int | None = self.store.count_unfinished()
        except Exception:
            unfinished = None
        return {"unfinished": unfinished, "problems": self.store.problems,
                "running": len(self.engine.running_ids())}

    # -- pieces --------------------------------------------------------------------------

    def _planner(self) -> Planner | None:
        model = self._runtime.model
        if model is None:
            return None
        names = self.executors.tool_names()
        descriptions = {n: getattr(self._runtime.tools.get(n), "description", "")
                        for n in names}
        return Planner(model, names, descriptions)

    def _tool_context(self, chat: ChatRef, approved: bool) -> ToolContext:
        """A tool node's context: the daemon's own, for the task's chat."""
        state = RunState(run_id=f"task:{chat.task_id}:{chat.node_id}", chat=chat)
        return self._runtime.tool_bridge.context(state, approved)

    async def _emit(self, event: TaskEvent) -> None:
        record = await self.workflow.append(WorkflowEvent.from_task_event(event))
        if record is None:
            return  # a replayed step: the chat has seen it
        if event.node_id is None and event.task.status.finished:
            self.prompts.forget_run(event.task.task_id)  # its prompts take no answer now
        await self.progress.on_event(event)

    def _publish(self, chat: ChatRef, text: str, announces: Announcement | None) -> None:
        self._runtime.conversation.publish_to_chat(chat, self._runtime.redactor.redact(text),
                                                   announces)

    def _publish_text(self, chat: ChatRef, text: str) -> None:
        self._publish(chat, text, None)

    def _agent_waiting(self, chat_key: str, decider: Decider) -> bool:
        """A chat run waits for an approval or for an answer: a bare "yes" is for it."""
        return self._runtime.agent.open_run(chat_key, by=decider) is not None

    def _remember_prompt(self, message: OutboundMessage, result: SendResult) -> None:
        announced = message.announces
        if isinstance(announced, TaskStatusRef):
            self.progress.status_sent(announced.task_id, result.platform_message_ids)
        elif isinstance(announced, TaskStepRef) and result.platform_message_ids:
            self.prompts.remember(message.chat_key, result.platform_message_ids,
                                  announced.task_id, announced.node_id)

    # -- what the conversation asks of the chat's tasks (conversation/chat_tasks.py) --------

    async def answer_reply(self, message: InboundMessage) -> str | None:
        """A reply meant for a task (its plan under review, a step waiting for an answer) is
        answered here; None: it is not one."""
        return await self.chat.reply(message)

    def stop_chat(self, chat_key: str) -> int:
        """/stop and a stop reaction cancel the chat's tasks with its runs."""
        return self.chat.stop_chat(chat_key)

    async def answer_reaction(self, message: InboundMessage) -> str | None:
        """A reaction on a task prompt decides it (None: not a task prompt, or nothing to say)."""
        decision = parse_reaction(message.reaction)
        if decision is None or not message.target_message_id:
            return None
        entry = self.prompts.lookup(message.chat_key, message.target_message_id)
        if entry is None:
            return None
        decider = Decider(message.provider, message.sender_id, message.sender_name)
        return await self.chat.decide_reaction(entry["run_id"], entry["approval_id"], decision,
                                               decider)
