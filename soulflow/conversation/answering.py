"""A turn's work with the agent: continue the chat's open run (a decision, an answer it waits
for) or start a new one, with the channel's typing indicator and read-acks while it runs and
/stop able to abort it. The turn (turns.py) decides which messages it answers; this answers them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from soulflow.agent.approvals import CLARIFY, Decider, parse_decision
from soulflow.agent.domain import AgentDomain, AgentReply
from soulflow.backends.base import RunMoved
from soulflow.channels.base import ChannelAdapter
from soulflow.contracts import InboundMessage, ReplyStatus
from soulflow.conversation.feedback import ChannelFeedback
from soulflow.conversation.input_text import AgentInput, input_text
from soulflow.conversation.replies import BusReplies
from soulflow.conversation.runs import ActiveRuns
from soulflow.conversation.streaming import ReplyStream, ReplyStreams, ShownPieces
from soulflow.errors import StoreUnavailable
from soulflow.security.vault import SecretVault
from soulflow.storage.beneath import Beneath

log = logging.getLogger(__name__)


def decider_of(message: InboundMessage) -> Decider:
    """The person deciding an approval by this reply or reaction."""
    return Decider(message.provider, message.sender_id, message.sender_name)


@dataclass(slots=True)
class AgentAnswers:
    agent: AgentDomain
    replies: BusReplies
    feedback: ChannelFeedback
    runs: ActiveRuns
    workspace: Beneath  # attachments are saved in the chat's zone beneath it
    max_inbound_chars: int
    backlog_for: Callable[[str], int]  # messages of a chat waiting behind its turn
    # the inbound sealer's vault: an attachment URL it sealed is opened for the download
    vault: SecretVault | None = None
    streams: ReplyStreams | None = None  # STREAM_REPLIES: answers appear as they are written

    async def continue_open_run(self, message: InboundMessage,
                                adapter: ChannelAdapter | None) -> bool:
        """Route a message to the chat's run that waits for a decision or an answer."""
        # a decision goes to the latest approval its author may decide (their own, in a group)
        parsed = parse_decision(message.text)
        deciding = decider_of(message) if parsed is not None else None
        open_run = self.agent.open_run(message.chat_key, by=deciding)
        if open_run is None:
            return False
        run_id, status = open_run
        if status == "waiting_approval":
            if parsed is None:
                return False  # an ordinary message: the approval stays pending
            decision, approval_id = parsed
            if decision == CLARIFY:
                await self.replies.reply(message, self.agent.pending_approval_text(run_id))
                return True
            stream = self._stream(adapter, message)
            reply = await self._with_feedback(message, adapter, lambda abort: self.agent.decide(
                run_id, decision, by=decider_of(message), approval_id=approval_id, abort=abort,
                stream=stream), stream)
            if reply is None:
                await self.replies.reply(message,
                                         f"There is no pending approval {approval_id} here.")
                return True
        else:
            given = await self.input_text([message], adapter)  # saves attachments (request_file)
            stream = self._stream(adapter, message)
            reply = await self._with_feedback(message, adapter, lambda abort: self.agent.answer(
                run_id, message, given.text, abort=abort, stream=stream), stream)
        await self.replies.reply(message, reply.content, announces=reply.approval,
                                 shown=shown_of(reply))
        return True

    def _stream(self, adapter: ChannelAdapter | None,
                message: InboundMessage) -> ReplyStream | None:
        """The stream of the reply to `message`, if replies stream in its chat."""
        if self.streams is None:
            return None
        return self.streams.open(adapter, message.chat, reply_to=message.message_id)

    async def _with_feedback(self, message: InboundMessage, adapter: ChannelAdapter | None,
                             work: Callable[[asyncio.Event], Awaitable[Any]],
                             stream: ReplyStream | None = None) -> Any:
        """Run `work` with the typing indicator on and /stop able to abort it; a reply it
        returns carries what its stream left in the chat."""
        try:
            async with self.feedback.typing_while(adapter, message.chat_id):
                with self.runs.track(message.chat_key) as abort:
                    reply = await work(abort)
        finally:
            pieces = await stream.close() if stream is not None else None
        if isinstance(reply, AgentReply) and pieces is not None and pieces.ids:
            reply.shown, reply.shown_texts = pieces.ids, pieces.texts
        return reply

    async def input_text(self, batch: list[InboundMessage], adapter: ChannelAdapter | None,
                         *, attributed: bool = False) -> AgentInput:
        return await input_text(batch, adapter, workspace=self.workspace,
                                max_chars=self.max_inbound_chars, attributed=attributed,
                                vault=self.vault)

    async def run_agent(self, batch: list[InboundMessage], adapter: ChannelAdapter | None,
                        given: AgentInput) -> AgentReply:
        """A new run for the batch; a failure inside is a FAILED reply, never silence."""
        first, last = batch[0], batch[-1]
        self.feedback.acknowledge(adapter, last.chat_id, last.message_id,
                                  backlog=self.backlog_for(first.chat_key))
        stream = self._stream(adapter, last)
        try:
            reply = await self._with_feedback(first, adapter, lambda abort: self.agent.respond(
                first, given.text, abort=abort, stream=stream), stream)
        except RunMoved:
            raise  # not a failure: the run goes on at the chat's new node (turns.py)
        except StoreUnavailable:
            raise  # Redis away mid-run: not the run's failure; the turn gives it back
        except Exception as exc:  # a bug must still end in a recorded failure, not silence
            log.exception("answering %s failed", first.key)
            reply = AgentReply("Sorry, something went wrong inside SoulFlow while answering; "
                               "the error is in the daemon's log.", ReplyStatus.FAILED,
                               f"{type(exc).__name__}: {exc}")
        if given.truncation_note:
            reply.content = f"{given.truncation_note}\n\n{reply.content}"
        return reply


def shown_of(reply: AgentReply) -> ShownPieces:
    """The messages the reply's stream left in the chat, which the reply edits."""
    return ShownPieces(reply.shown, reply.shown_texts)
