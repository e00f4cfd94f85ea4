"""What a reaction does: a stop sign stops the chat's runs and tasks (as /stop does); a
decision emoji on an approval prompt decides that approval, on a task's prompt that prompt.

Reactions are never answered as messages: one by someone who may not decide is ignored, since
answering each would let anyone make the bot post at will. A decision runs in its chat's
serial queue, behind the turn that may be waiting for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from soulflow import tracing
from soulflow.agent.approvals import CLARIFY, parse_reaction
from soulflow.agent.domain import AgentDomain
from soulflow.contracts import Announcement, ChatRef, InboundMessage, ReplyStatus
from soulflow.conversation.access import AccessPolicy
from soulflow.conversation.answering import decider_of
from soulflow.conversation.chat_tasks import ChatTasks
from soulflow.conversation.serial import Job

log = logging.getLogger(__name__)

STOP_REACTIONS = frozenset({"🛑", "⛔", "octagonal_sign", "no_entry", "stop_sign"})

@dataclass(slots=True)
class Reactions:
    access: AccessPolicy
    agent: AgentDomain
    tasks: ChatTasks | None
    stop_chat: Callable[[str], Awaitable[int]]  # the chat's runs and tasks, as /stop
    submit: Callable[[str, Job], None]  # into the chat's serial queue
    publish: Callable[[ChatRef, str, Announcement | None], Awaitable[list[bool]]]
    # stops under way: a stop finds the chat's tasks in the store, and a reaction is
    # handled where nothing may wait for that (the intake, the claim loop)
    _stopping: set[asyncio.Task[None]] = field(default_factory=set, init=False)

    def handle(self, message: InboundMessage) -> None:
        """Act on a reaction by an allowed user in a chat this node holds."""
        if not self.access.is_allowed(message.provider, message.sender_id):
            return
        if message.reaction in STOP_REACTIONS:
            job = asyncio.create_task(self._stop(message.chat_key),
                                      name=f"stop-reaction:{message.chat_key}")
            self._stopping.add(job)
            job.add_done_callback(self._stopping.discard)
        decision = parse_reaction(message.reaction)
        approvals = self.agent.approvals
        if decision is None or approvals is None or not message.target_message_id:
            return
        target = message.target_message_id

        async def decide() -> None:  # in the chat's turn: the lookup waits there
            entry = await approvals.find(message.chat_key, target)
            if entry is None:  # not an approval prompt: perhaps a task's
                if self.tasks is not None:
                    await self._task_reaction(message)
                return
            if decision == CLARIFY:
                text = self.agent.pending_approval_text(entry["run_id"])
                self.publish(self.agent.chat_of_run(entry["run_id"]), text, None)
                return
            reply = await self.agent.decide(entry["run_id"], decision, by=decider_of(message),
                                            approval_id=entry["approval_id"])
            # a reaction by someone who may not decide is ignored: answering each one would
            # let anyone make the bot post at will (a reply "ok" is answered, once per message)
            if reply is not None and reply.status is not ReplyStatus.REFUSED:
                with tracing.within(reply.trace):  # delivered in the run's turn's trace
                    self.publish(self.agent.chat_of_run(entry["run_id"]), reply.content,
                                 reply.approval)

        self.submit(message.chat_key, decide)

    async def _stop(self, chat_key: str) -> None:
        """The chat's runs and tasks, as /stop (its runs are aborted first, at once)."""
        try:
            stopped = await self.stop_chat(chat_key)
        except Exception:
            log.exception("the stop reaction in %s failed", chat_key)
            return
        log.info("stop reaction in %s stopped %d run(s)", chat_key, stopped)

    async def settle(self) -> None:
        """Let the stops under way finish (at shutdown)."""
        if self._stopping:
            await asyncio.gather(*list(self._stopping), return_exceptions=True)

    async def _task_reaction(self, message: InboundMessage) -> None:
        assert self.tasks is not None
        answer = await self.tasks.answer_reaction(message)
        if answer is not None:
            self.publish(message.chat, answer, None)
