"""Wiring of task graphs into a daemon: store, workflow events, engine, executors, chat, tool.

Kept out of runtime/daemon.py (which builds `TaskServices(TaskParts(...))` and calls `start`,
`stop` and `state`) so the daemon's boot file stays about boot order. The services are given
the parts of the daemon they use (`TaskParts`), never the runtime. The engine starts after the
agent (its nodes are agent runs) and stops before it; stopping leaves running nodes `running`
in the checkpoint, and the next start resumes them (docs/tasks.md, "Checkpoints and
restarts"). The services are built before the conversation, which is given them as its
`ChatTasks` (soulflow/conversation/chat_tasks.py: task replies and reactions in chats, /stop
cancelling a chat's tasks) and `/task` among its commands.

The stores are the backend's (the task store, its plans under review, the workflow events and
the task prompts' messages: files under runtime/, or Redis, where a task is written only under
the lease of its chat's partition). When other nodes share the work, the engine follows the
partitions this node holds (the "tasks:ownership" loop): tasks of chats that come to this node
resume here, those of chats that leave stop here (docs/scaling.md, "Tasks").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from soulflow.agent.approvals import Decider, parse_reaction
from soulflow.agent.budget import Budgets
from soulflow.agent.domain import AgentDomain
from soulflow.agent.run.loop import ContextFactory, SystemPrompt
from soulflow.agent.run.reducer import RunState
from soulflow.agent.tools.base import ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.agent.usage import UsageMeter
from soulflow.backends.base import Backend, RunJournal
from soulflow.bus.bus import MessageBus
from soulflow.channels.registry import ChannelRegistry
from soulflow.config import Settings
from soulflow.contracts import (
    Announcement,
    ChatRef,
    InboundMessage,
    OutboundMessage,
    Provider,
    SendResult,
    TaskStatusRef,
    TaskStepRef,
)
from soulflow.conversation.replies import BusReplies
from soulflow.events.hub import EventHub
from soulflow.events.workflow import WorkflowEvent, WorkflowEventService
from soulflow.security.redact import Redactor
from soulflow.supervisor import Supervisor
from soulflow.tasks.chat import TaskChat
from soulflow.tasks.contracts import TaskEvent
from soulflow.tasks.engine import TaskEngine
from soulflow.tasks.executors import AgentParts, DaemonExecutors, is_task_run
from soulflow.tasks.planner import Planner
from soulflow.tasks.progress import TaskProgress
from soulflow.tasks.tool import TaskTool

__all__ = ["TaskParts", "TaskServices", "is_task_run"]

log = logging.getLogger(__name__)

OWNERSHIP_LOOP = "tasks:ownership"


@dataclass(frozen=True, slots=True)
class TaskParts:
    """The parts of a daemon the task services use."""

    settings: Settings
    backend: Backend  # the task stores; which chats this node holds
    agent: AgentDomain  # the approvals' rule; is a chat's run waiting for an answer
    runs: RunJournal | None  # the agent's journal and model: None without a provider
    model: Provider | None
    system_prompt: SystemPrompt
    tools: ToolRegistry  # the task tool joins it
    tool_context: ContextFactory  # the daemon's own (runtime/tool_bridge.py)
    channels: ChannelRegistry  # progress messages are edited through the chat's adapter
    replies: BusReplies  # what tasks tell a chat
    bus: MessageBus  # its sent messages: task prompts remembered for reactions
    redactor: Redactor
    hub: EventHub  # live workflow events
    supervisor: Supervisor  # runs "tasks:ownership" on a shared backend
    usage: UsageMeter | None = None  # counts the task steps' model calls
    budgets: Budgets | None = None  # and caps them


class TaskServices:
    """Everything tasks need in one daemon (see the module docstring)."""

    def __init__(self, parts: TaskParts) -> None:
        settings = parts.settings
        self._parts = parts
        backend = parts.backend
        self.store = backend.tasks
        self.workflow = WorkflowEventService(backend.workflow, workspace=settings.workspace,
                                             redactor=parts.redactor, hub=parts.hub)
        self.proposals = backend.proposals  # plans under review, one per chat
        # platform message ids of task prompts, so a reaction decides them
        self.prompts = backend.task_prompts
        for problem in self.store.problems:
            log.error("task store: %s", problem)
        self.workflow.bind_task_store(self.store)
        agent: AgentParts | None = None
        model = parts.model
        if parts.runs is not None and model is not None:
            agent = AgentParts(parts.runs, lambda: model, parts.system_prompt,
                               parts.tool_context, int(settings["AGENT_MAX_TURNS"]),
                               parts.usage, parts.budgets)
        self.executors = DaemonExecutors(parts.tools, self._tool_context, agent,
                                         redactor=parts.redactor)
        self.progress = TaskProgress(self._publish, editor=parts.channels.get,
                                     interval_s=float(settings["TASK_PROGRESS_INTERVAL_S"]))
        self.engine = TaskEngine(self.store, self.executors.executors(),
                                 tool_names=self.executors.tool_names(), emit=self._emit,
                                 max_parallel=int(settings["TASK_MAX_PARALLEL"]),
                                 owns=backend.owns, offload=backend.offload)
        self.approvers = parts.agent.approvers  # tasks follow the run approvals' rule
        self.chat = TaskChat(self.engine, self.executors, self._planner, self.proposals,
                             self.approvers, agent_waiting=self._agent_waiting)
        parts.tools.register(TaskTool(lambda: self.chat, self._publish_text))
        parts.bus.dispatcher.sent_listeners.append(self._remember_prompt)

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> list[str]:
        """After the backend started (Redis: this node holds its first partitions)."""
        parts = self._parts
        backend = parts.backend
        # a chat with a task running here is work in hand: a node joining the cluster must
        # not interrupt a task mid-step (it moves when its loop has finished or waits)
        backend.hold_chats(self.engine.running_chats)
        backend.on_partitions_changed(self.engine.partitions_changed)
        if backend.shared:
            # a lost partition must stop its tasks here well within the third of a TTL
            # between this node's lease deadline and the lease's expiry in Redis
            interval = float(parts.settings["REDIS_LEASE_TTL_S"]) / 8
            parts.supervisor.spawn(OWNERSHIP_LOOP, lambda: self.engine.watch(interval))
        resumed = await self.engine.start()
        if resumed:
            log.info("resumed %d task(s) from their checkpoints: %s", len(resumed),
                     ", ".join(resumed))
        return resumed

    async def stop(self) -> None:
        """The ownership loop, then the engine (its nodes stay `running` in the checkpoint,
        resumed at the next start), then what was still telling the chats."""
        await self._parts.supervisor.cancel([OWNERSHIP_LOOP])
        await self.engine.stop()
        await self.chat.stop()
        await self.progress.stop()

    def state(self, unfinished: int | None) -> dict[str, Any]:
        """For /api/state, with the count of unfinished tasks as the caller read it off the
        event loop (`TaskStore.count_unfinished`); None while the store does not answer
        (Redis away: the backend's own status says so)."""
        return {"unfinished": unfinished, "problems": list(self.store.problems),
                "running": len(self.engine.running_ids())}

    # -- pieces --------------------------------------------------------------------------

    def _planner(self) -> Planner | None:
        model = self._parts.model
        if model is None:
            return None
        names = self.executors.tool_names()
        descriptions = {n: getattr(self._parts.tools.get(n), "description", "")
                        for n in names}
        return Planner(model, names, descriptions)

    def _tool_context(self, chat: ChatRef, approved: bool) -> ToolContext:
        """A tool node's context: the daemon's own, for the task's chat."""
        state = RunState(run_id=f"task:{chat.task_id}:{chat.node_id}", chat=chat)
        return self._parts.tool_context(state, approved)

    async def _emit(self, event: TaskEvent) -> None:
        record = await self.workflow.append(WorkflowEvent.from_task_event(event))
        if record is None:
            return  # a replayed step: the chat has seen it
        if event.node_id is None and event.task.status.finished:
            self.prompts.forget_run(event.task.task_id)  # its prompts take no answer now
        await self.progress.on_event(event)

    def _publish(self, chat: ChatRef, text: str, announces: Announcement | None) -> None:
        self._parts.replies.publish_to_chat(chat, self._parts.redactor.redact(text), announces)

    def _publish_text(self, chat: ChatRef, text: str) -> None:
        self._publish(chat, text, None)

    def _agent_waiting(self, chat_key: str, decider: Decider) -> bool:
        """A chat run waits for an approval or for an answer: a bare "yes" is for it."""
        return self._parts.agent.open_run(chat_key, by=decider) is not None

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

    async def stop_chat(self, chat_key: str) -> int:
        """/stop and a stop reaction cancel the chat's tasks with its runs."""
        return await self.chat.stop_chat(chat_key)

    async def answer_reaction(self, message: InboundMessage) -> str | None:
        """A reaction on a task prompt decides it (None: not a task prompt, or nothing to say)."""
        decision = parse_reaction(message.reaction)
        if decision is None or not message.target_message_id:
            return None
        entry = await self.prompts.find(message.chat_key, message.target_message_id)
        if entry is None:
            return None
        decider = Decider(message.provider, message.sender_id, message.sender_name)
        return await self.chat.decide_reaction(entry["run_id"], entry["approval_id"], decision,
                                               decider)
