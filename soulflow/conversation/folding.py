"""Folding: messages that queue up in a chat while its turn runs are answered in one turn.

Someone who sends five messages while the agent is still answering the first wants one
answer to the five, not five answers in a row (and the platform's rate limits agree). Each
chat has a FIFO of batches waiting for their turn. The first turn of an idle chat takes one
batch; when a turn ends with batches queued behind it, those queued up while it ran, so the
next turn takes the head and then as many following batches as fit under `fold_max`
messages, as long as each message may be folded (commands, approval decisions and the
daemon's own cron messages are not: they keep their own handling, in order). `fold_max=1`
turns folding off.

Every folded message is journaled on its own before it is queued, so a crash mid-turn replays
them all, and the turn completes each one as answered by its one reply.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from soulflow.agent.approvals import parse_decision
from soulflow.agent.domain import AgentDomain
from soulflow.channels.registry import ChannelRegistry
from soulflow.contracts import InboundMessage

log = logging.getLogger(__name__)

Batch = list[InboundMessage]


@dataclass(slots=True)
class Turn:
    """The messages one turn answers; `folded` when it joined batches that queued up."""

    batch: Batch
    folded: bool = False


class ChatBacklog:
    def __init__(self, fold_max: int = 20) -> None:
        self.fold_max = max(1, fold_max)
        self._queues: dict[str, deque[Batch]] = {}
        self._warm: set[str] = set()  # chats whose last turn ended with batches queued

    def push(self, batch: Batch) -> str:
        """Queue a batch behind its chat's earlier ones; returns the chat key."""
        key = batch[0].chat_key
        self._queues.setdefault(key, deque()).append(batch)
        return key

    def push_front(self, batch: Batch) -> str:
        """Put a batch given back (its store was away) before its chat's later ones, so the
        chat is still answered in order; returns the chat key."""
        key = batch[0].chat_key
        self._queues.setdefault(key, deque()).appendleft(batch)
        return key

    def take(self, chat_key: str, can_fold: Callable[[InboundMessage], bool]) -> Turn | None:
        """The next turn of a chat, or None if an earlier turn already took everything."""
        queue = self._queues.get(chat_key)
        if not queue:
            return None
        turn = Turn(list(queue.popleft()))
        if chat_key in self._warm and self.fold_max > 1 and all(map(can_fold, turn.batch)):
            while queue and len(turn.batch) + len(queue[0]) <= self.fold_max \
                    and all(map(can_fold, queue[0])):
                turn.batch.extend(queue.popleft())
                turn.folded = True
        if not queue:
            del self._queues[chat_key]
        return turn

    def drain(self, chat_key: str) -> Batch:
        """Take every message the chat has queued, in order: they go back to the journal
        with a batch given back before them, or they would be answered before it."""
        self._warm.discard(chat_key)
        return [message for batch in self._queues.pop(chat_key, ()) for message in batch]

    def finished(self, chat_key: str) -> None:
        """A turn of this chat ended: what is queued now queued up while it ran."""
        if self._queues.get(chat_key):
            self._warm.add(chat_key)
        else:
            self._warm.discard(chat_key)

    def pending_for(self, chat_key: str) -> int:
        return sum(len(b) for b in self._queues.get(chat_key, ()))

    @property
    def pending(self) -> int:
        return sum(len(b) for q in self._queues.values() for b in q)

    def clear(self) -> None:
        self._queues.clear()
        self._warm.clear()


@dataclass(slots=True)
class FoldRule:
    """Which queued messages a turn may fold together.

    Plain input for the agent only: commands, approval decisions, cron jobs and a message
    whose run a crash interrupted (it resumes with its own input) keep their own turn. A chat
    whose run waits for an approval or an answer does not fold (the next message may be the
    answer), nor does the local terminal/web chat (one answer per line typed).
    """

    registry: ChannelRegistry
    agent: AgentDomain

    def for_chat(self, chat_key: str) -> Callable[[InboundMessage], bool]:
        """The rule for the chat's next turn. It reads the run store, which may be Redis and
        away: then nothing folds (the turn itself meets the store and is given back); a
        failure here must never escape the chat's job, or the chat's backlog would keep its
        messages with no job to run them."""
        try:
            if chat_key.startswith("local:") or self.agent.open_run(chat_key) is not None:
                return _never
        except Exception as exc:
            log.warning("%s: cannot tell whether its queued messages may fold (%s: %s)",
                        chat_key, type(exc).__name__, exc)
            return _never
        return self._may_fold_or_not

    def _may_fold_or_not(self, message: InboundMessage) -> bool:
        try:
            return self.may_fold(message)
        except Exception:  # the run store away: keep the message's own turn
            return False

    def may_fold(self, message: InboundMessage) -> bool:
        if message.cron is not None or parse_decision(message.text) is not None:
            return False
        loop = self.agent.loop
        if loop is not None and loop.store.find(inbound_key=message.key):
            return False
        adapter = self.registry.get(message.provider)
        return adapter is None or adapter.parse_command(message.text) is None


def _never(message: InboundMessage) -> bool:
    return False
