"""Runs driven again outside a message's turn: those left running when the daemon (or, on
Redis, the chat's node) stopped, and those another decision released (every run waiting on one
budget cap is decided with it). Each is driven in its chat's turn, so it never overtakes the
chat's messages, and its reply is published to its chat."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from soulflow import tracing
from soulflow.agent.domain import AgentDomain
from soulflow.backends.base import RunMoved
from soulflow.bus.bus import MessageBus
from soulflow.contracts import Announcement, ChatRef
from soulflow.conversation.answering import shown_of
from soulflow.conversation.serial import Job
from soulflow.conversation.streaming import ShownPieces

log = logging.getLogger(__name__)

class Publish(Protocol):
    """Queues a reply to a chat (replies.py `publish_to_chat`), editing what its stream
    showed before the daemon stopped."""

    def __call__(self, chat: ChatRef, content: str, announces: Announcement | None = None, *,
                 shown: ShownPieces | None = None) -> Awaitable[list[bool]]: ...


@dataclass(slots=True)
class RunResumer:
    agent: AgentDomain
    bus: MessageBus
    submit: Callable[[str, Job], None]  # the chats' serial executor: a job in a chat's turn
    publish: Publish  # queues a reply to a chat (replies.py)

    async def resume_runs(self) -> int:
        """Continue runs that were mid-way when the daemon stopped (their inbound is done),
        in the chats this node owns; with Redis also whenever it comes to own more chats (a
        node died), each run once (`AgentDomain.resumable_runs`). A run whose inbound message
        is still pending is continued by that message's turn instead."""
        resumed = 0
        pending = {m.key for m in await self.bus.inbound.pending()}
        for run_id in await self.agent.resumable_runs(self.bus.backend.owns,
                                                      pending_inbound=pending):
            self.resume(run_id)
            resumed += 1
        return resumed

    def resume_released(self, run_ids: list[str]) -> None:
        """Drive runs another decision released (runs waiting on one budget cap: approving
        one approves them all), each in its chat's turn, and deliver their replies."""
        for run_id in run_ids:
            self.resume(run_id)

    def resume(self, run_id: str) -> None:
        chat = self.agent.chat_of_run(run_id)

        async def job() -> None:
            try:
                reply = await self.agent.resume(run_id)
            except RunMoved:  # taken over again by a newer holder of the chat
                log.info("run %s moved to another node, which continues it", run_id)
                return
            if reply.quiet:
                return  # waits on an approval its chat was told about already
            with tracing.within(reply.trace):  # delivered in the run's turn's trace
                self.publish(chat, reply.content, reply.approval, shown=shown_of(reply))

        self.submit(chat.key, job)
