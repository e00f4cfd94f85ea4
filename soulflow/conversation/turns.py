"""The conversation of every chat: a message taken in → claimed → queued for its chat → its
turn → answered → completed.

Per message: the adapter's priming history and messages not addressed to the bot are only
recorded as seen; reactions stop runs and decide approvals (reactions.py); users not on the
allow-list get one polite refusal; everything else is journaled before the adapter may move
its cursor, so a crash replays instead of losing, and the journal's seen ids stop a second
answer (intake.py). A message that fails on the way in is quarantined (quarantine.py), never
retried forever. What this node answers comes from the backend's `claim()` (claiming.py:
with Redis, the chats whose partition it holds), not from what it read. Each chat is handled
serially, different chats concurrently up to a bound; what queues up in a chat while its turn
runs is folded into its next turn (folding.py).

Who answers a turn is `Conversation._answer`, in order: a reply already stored (a crash after
replying) → a command (commands.py) → the chat's tasks (`ChatTasks`, given at construction) →
the chat's run that waits for a decision or an answer → the agent (answering.py). A reply is
stored in the outbox, split for its platform once (replies.py), before its inbound message is
completed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping
from pathlib import Path

from soulflow import tracing
from soulflow.agent.domain import AgentDomain
from soulflow.backends.base import RunMoved
from soulflow.bus.bus import MessageBus
from soulflow.channels.base import ChannelAdapter
from soulflow.channels.registry import ChannelRegistry
from soulflow.contracts import (
    Announcement,
    ChatRef,
    EventSink,
    InboundMessage,
    IntakeStage,
    ReplyStatus,
)
from soulflow.conversation.access import AccessPolicy, refusal_text
from soulflow.conversation.answering import AgentAnswers, shown_of
from soulflow.conversation.chat_tasks import ChatTasks
from soulflow.conversation.claiming import ClaimLoop
from soulflow.conversation.commands import STOP_NAMES, CommandHandler, CommandRouter
from soulflow.conversation.feedback import ChannelFeedback, FeedbackPolicy
from soulflow.conversation.folding import ChatBacklog, FoldRule, Turn
from soulflow.conversation.grouping import Grouper
from soulflow.conversation.intake import InboundScreen
from soulflow.conversation.quarantine import APOLOGY, Quarantine
from soulflow.conversation.reactions import Reactions
from soulflow.conversation.replies import BusReplies
from soulflow.conversation.resuming import RunResumer
from soulflow.conversation.runs import ActiveRuns
from soulflow.conversation.serial import KeyedSerialExecutor
from soulflow.conversation.streaming import ReplyStreams
from soulflow.errors import StoreUnavailable
from soulflow.logs import log_context
from soulflow.security.inbound import InboundSealer
from soulflow.security.references import (
    inspect_secret_references_for_orchestration,
    reference_labels,
    secret_resolution_required_message,
)
from soulflow.security.vault import chat_scope
from soulflow.storage.beneath import Beneath

log = logging.getLogger(__name__)

# a batch given back after a failure nothing could record waits this long first, so a failure
# that repeats (a store down, a full disk) costs a line a second, not a busy loop
RELEASE_PAUSE_S = 1.0
EMPTY_MESSAGE_REPLY = "I received an empty message; write something and I'll answer."


def _turn_span(turn: Turn) -> tracing.SpanScope:
    """The turn's span: a child of its first message's intake, linked to the others'."""
    if not tracing.active():
        return tracing.OFF
    first = turn.batch[0]
    return tracing.span("soulflow.turn", {
        "soulflow.channel": first.provider, "soulflow.turn.messages": len(turn.batch),
        "soulflow.turn.folded": turn.folded, "soulflow.turn.cron": first.cron is not None},
        parent=first.trace, links=[m.trace for m in turn.batch[1:] if m.trace])


class Conversation:
    """Every chat's conversation in one daemon (see the module docstring).

    Built with everything that answers a message: the agent, the chat commands backed by the
    daemon's services (`commands`) and the chat's task graphs (`tasks`); nothing is attached
    afterwards. The channels only read and send: the runtime hands what they read to `ingest`.
    """

    def __init__(self, registry: ChannelRegistry, bus: MessageBus, agent: AgentDomain, *,
                 access: AccessPolicy, workspace: Path, tasks: ChatTasks | None = None,
                 commands: Mapping[str, CommandHandler] | None = None, concurrency: int = 8,
                 max_inbound_chars: int = 100_000, grouping_window_s: float | None = None,
                 grouping_max: int = 5, sealer: InboundSealer | None = None,
                 on_event: EventSink | None = None, fold_max: int = 20,
                 feedback: FeedbackPolicy | None = None, claim_wait_s: float = 1.0,
                 replies: BusReplies | None = None,
                 streams: ReplyStreams | None = None) -> None:
        self.registry = registry
        self.bus = bus
        self.agent = agent
        self.access = access
        self.tasks = tasks
        self.workspace = Beneath(workspace)  # attachments go to each chat's zone in it
        self.max_inbound_chars = max_inbound_chars
        self.sealer = sealer
        self._on_event = on_event or (lambda kind, data: None)
        self.quarantine = Quarantine(bus.inbound_dlq, bus.inbound.mark_seen, on_record=lambda e: (
            self._on_event("inbound.quarantined", {
                "provider": e.provider, "chat_id": e.chat_id, "message_id": e.message_id,
                "stage": e.stage, "error": e.error})))
        self._executor = KeyedSerialExecutor("inbound", concurrency)
        self.runs = ActiveRuns()
        self.commands = CommandRouter(self.stop_chat, dict(commands or {}))
        # replies and completions; the runtime builds them first, for the services that
        # also write to chats (tools, tasks, heartbeat, notices)
        self.replies = replies or BusReplies(registry, bus, self._on_event)
        self.reactions = Reactions(access, agent, tasks, self.stop_chat, self._executor.submit,
                                   self.publish_to_chat)
        self._screen = InboundScreen(bus.inbound, access, sealer, self.quarantine,
                                     on_reaction=self.reactions.handle, refuse=self._refuse,
                                     apologise=self._apologise, owns=bus.backend.owns)
        self._backlog = ChatBacklog(fold_max)
        self._fold_rule = FoldRule(registry, agent)
        self.release_pause_s = RELEASE_PAUSE_S
        self.claimer = ClaimLoop(bus.inbound.claim, self._take_claimed, wait_s=claim_wait_s)
        self.resumer = RunResumer(agent, bus, self._executor.submit,
                                  self.replies.publish_to_chat)
        agent.release_runs = self.resumer.resume_released  # decided along with another run
        self.feedback = ChannelFeedback(feedback)  # typing and read-acks, coalesced per chat
        self._grouper = (Grouper(grouping_window_s, grouping_max, self._submit)
                         if grouping_window_s else None)
        self.answers = AgentAnswers(agent, self.replies, self.feedback, self.runs,
                                    self.workspace, max_inbound_chars, self.backlog_for,
                                    sealer.vault if sealer is not None else None, streams)
        self.received_count = 0
        self.answered_count = 0
        self.max_turns_count = 0
        self.failed_count = 0

    # -- lifecycle -----------------------------------------------------------------------

    async def resume_pending(self) -> int:
        """The claim loop's first round, at boot: queue the messages the previous process
        (or, with Redis, a dead node of these partitions) accepted but did not finish."""
        resumed = await self.claimer.round()
        if resumed:
            log.info("resuming %d inbound message(s) left unfinished", resumed)
        return resumed

    async def claim_loop(self) -> None:
        """The "inbound:claim" loop: run what the backend hands this node, until cancelled."""
        await self.claimer.run()

    async def stop(self, timeout: float) -> None:
        await self.reactions.settle()
        if self._grouper is not None:
            self._grouper.flush_all()
        await self._executor.stop(timeout)
        await self.feedback.stop()
        self._backlog.clear()  # still pending in the journal: the next start answers them

    @property
    def queued(self) -> int:
        return self._backlog.pending + (self._grouper.buffered if self._grouper else 0)

    def backlog_for(self, chat_key: str) -> int:
        """Messages of a chat waiting for their turn (not counting the one running)."""
        return self._backlog.pending_for(chat_key)

    @property
    def active_chats(self) -> int:
        return self._executor.active_keys

    async def stop_chat(self, chat_key: str) -> int:
        """Abort the chat's active runs (at once) and cancel its tasks (/stop, a stop
        reaction); how many were running."""
        stopped = self.runs.stop(chat_key)
        if self.tasks is not None:
            stopped += await self.tasks.stop_chat(chat_key)
        return stopped

    # -- intake --------------------------------------------------------------------------

    async def ingest(self, adapter: ChannelAdapter,
                     batch: list[InboundMessage]) -> list[InboundMessage]:
        """Journal what needs an answer, record the rest as seen, then let the adapter commit.
        The claim loop hands the journaled messages to the node that answers them.

        A message that fails anywhere on the way in is quarantined (inbound DLQ, marked seen)
        before the commit, and the others go on: one poison message never wedges a channel.
        """
        fresh, seen_only = await self._screen.screen(batch)
        await self.bus.inbound.mark_seen(seen_only)
        adapter.commit(batch)
        for message in fresh:
            self._received(message)
        return fresh

    async def inject(self, message: InboundMessage) -> bool:
        """Journal a message the daemon wrote itself (a cron job), to be answered exactly once
        (the claim loop hands it to its chat's node).

        Trusted input: no allow-list, mention or grouping checks. The journal's seen ids drop a
        second injection of the same message id (a job re-fired after a crash)."""
        if not await self._screen.take_in_trusted(message):
            return False
        self._received(message)
        return True

    def _received(self, message: InboundMessage) -> None:
        """Count a journaled message and announce it (the dashboard's live feed)."""
        self.received_count += 1
        self._on_event("inbound.received", {
            "provider": message.provider, "chat_id": message.chat_id,
            "message_id": message.message_id, "sender_id": message.sender_id,
            # the name the approval card shows too: a person, not a numeric id
            "sender_name": message.sender_name[:100], "text": message.text[:500]})

    def _refuse(self, message: InboundMessage) -> None:
        log.info("refused %s user %s (not on the allow-list)", message.provider,
                 message.sender_id)
        if self.access.should_explain_refusal(message.provider, message.sender_id):
            self.replies.reply(message, refusal_text(message.provider, message.sender_id),
                               inbound_key=None)

    def _apologise(self, message: InboundMessage) -> None:
        """Tell the sender their message was set aside (it holds nothing of the message)."""
        try:
            self.replies.reply(message, APOLOGY, inbound_key=None)
        except Exception:
            log.exception("could not tell %s that its message was quarantined", message.key)

    # -- queueing ------------------------------------------------------------------------

    async def _take_claimed(self, message: InboundMessage) -> None:
        try:
            await self._queue(message)
        except Exception as exc:  # journaled: record, finish it, never replay it forever
            log.exception("could not queue %s", message.key)
            await self._fail_turn([message], exc)

    async def _queue(self, message: InboundMessage) -> None:
        if message.kind == "reaction":  # read by another node for this node's chat (intake)
            self.reactions.handle(message)
            await self.replies.complete([message.key], ReplyStatus.IGNORED)
            return
        if await self._stop_now(message):
            return
        if self._grouper is not None and message.provider != "local":
            self._grouper.add(message)
        else:
            self._submit([message])

    async def _stop_now(self, message: InboundMessage) -> bool:
        """/stop must not wait behind the very run it stops: handle it outside the queue."""
        adapter = self.registry.get(message.provider)
        command = adapter.parse_command(message.text) if adapter is not None else None
        if command is None or command.name not in STOP_NAMES:
            return False
        await self.replies.answer(message, await self.commands.stop(message.chat_key),
                                  [message.key], ReplyStatus.ANSWERED)
        return True

    def _submit(self, batch: list[InboundMessage]) -> None:
        """Queue a batch for its chat's next turn; the turn may fold it with others."""
        chat_key = self._backlog.push(batch)
        self._executor.submit(chat_key, lambda: self._take_turn(chat_key))

    # -- turns ---------------------------------------------------------------------------

    async def _take_turn(self, chat_key: str) -> None:
        """Answer the chat's next batch, folded with those queued behind it when allowed."""
        try:
            await self.agent.preload(chat_key)
        except Exception as exc:  # the turn reads what it needs on the spot (or is given back)
            log.warning("%s: could not read its runs ahead (%s: %s)", chat_key,
                        type(exc).__name__, exc)
        turn = self._backlog.take(chat_key, self._fold_rule.for_chat(chat_key))
        if turn is None:
            return  # an earlier turn folded this job's batch in
        if not self.bus.backend.owns(chat_key):  # the chat moved while this batch waited
            await self._give_back(turn.batch)  # its new holder runs it, in order
            self._backlog.finished(chat_key)
            return
        try:
            # every log line of this turn names its chat; its span continues the trace of the
            # first message's intake (journaled with it: also after a restart or a takeover)
            with log_context(chat=chat_key), _turn_span(turn):
                await self._answer(turn)
        except asyncio.CancelledError:
            raise
        except RunMoved:  # a decision or an answer to a run the chat's new node took over
            log.info("%s: its chat moved to another node, which handles it",
                     turn.batch[0].key)
            await self._give_back(turn.batch)  # whoever holds the chat next, even us
        except Exception as exc:
            if self._store_away(exc):  # expected while Redis is away: the batch is given back
                log.warning("handling %s stopped: the store did not answer (%s: %s)",
                            turn.batch[0].key, type(exc).__name__, exc)
            else:
                log.exception("handling %s failed", turn.batch[0].key)
            await self._fail_turn(turn.batch, exc)
        finally:
            self._backlog.finished(chat_key)

    async def _answer(self, turn: Turn) -> None:
        """Who answers the turn: the first of these that takes it.

        1. nobody, if a reply to it is stored already (the last process crashed, or the chat
           moved, after replying);
        2. a command (`/help`, `/secret`, `/task` ...: commands.py);
        3. the chat's tasks, when the message answers one of them (`ChatTasks`);
        4. the chat's run waiting for this person's decision or answer (answering.py);
        5. the agent, in a new run: unless the text is empty or names a secret this chat
           cannot use.

        Commands, task answers and decisions are single messages from a person, never a
        folded batch or a cron job."""
        batch = turn.batch
        first, keys = batch[0], [m.key for m in batch]
        for key in keys:  # (a message read for the first time cannot have an answer yet)
            if not self.bus.inbound.first_delivery(key) and \
                    await self.bus.outbox.has_answered(key):
                await self.replies.complete(keys, ReplyStatus.ANSWERED)
                return
        adapter = self.registry.get(first.provider)
        personal = len(batch) == 1 and first.cron is None
        if personal and adapter is not None and \
                (command := adapter.parse_command(first.text)) is not None:
            await self._reply_and_complete(first, await self.commands.handle(command, first))
            return
        if personal and self.tasks is not None and \
                (answer := await self.tasks.answer_reply(first)) is not None:
            await self._reply_and_complete(first, answer)
            return
        if personal and await self.answers.continue_open_run(first, adapter):
            await self.replies.complete(keys, ReplyStatus.ANSWERED)
            return
        await self._run_agent(turn, adapter)

    async def _reply_and_complete(self, message: InboundMessage, text: str) -> None:
        await self.replies.answer(message, text, [message.key], ReplyStatus.ANSWERED)

    async def _run_agent(self, turn: Turn, adapter: ChannelAdapter | None) -> None:
        """A new agent run answers the turn's messages with one reply."""
        batch = turn.batch
        first, keys = batch[0], [m.key for m in batch]
        given = await self.answers.input_text(batch, adapter, attributed=turn.folded)
        if not given.text.strip():
            await self.replies.answer(first, EMPTY_MESSAGE_REPLY, keys, ReplyStatus.IGNORED,
                                      "empty message")
            return
        if self.sealer is not None and reference_labels(given.text):
            vault = self.sealer.vault  # opened where the vault may wait (off the loop)
            report = await vault.offload(
                inspect_secret_references_for_orchestration, given.text, vault,
                chat=chat_scope(first.provider, first.chat_id))
            if not report.ok:
                await self.replies.answer(first, secret_resolution_required_message(report),
                                          keys, ReplyStatus.FAILED,
                                          "secret_resolution_required")
                return
        try:
            reply = await self.answers.run_agent(batch, adapter, given)
        except RunMoved:  # the chat is another node's now: it runs this message again
            log.info("%s: its chat moved to another node, which answers it", first.key)
            await self._give_back(batch)  # whoever holds the chat next, even us
            return
        if reply.quiet:  # its chat was told already: it waits on the same cap
            await self.replies.complete(keys, reply.status, reply.error)
        else:
            await self.replies.answer(batch[-1], reply.content, keys, reply.status,
                                      reply.error, inbound_key=first.key,
                                      announces=reply.approval, shown=shown_of(reply))
        if reply.status is ReplyStatus.FAILED:
            self.failed_count += 1
        elif reply.status is ReplyStatus.MAX_TURNS:
            self.max_turns_count += 1  # answered with a best effort: counted on its own
        else:
            self.answered_count += 1

    def _store_away(self, exc: Exception) -> bool:
        """The failure was the shared store not answering (or the backend says it is away)."""
        backend = self.bus.backend
        return not backend.status().get("connected", True) or isinstance(exc, StoreUnavailable)

    async def _fail_turn(self, batch: list[InboundMessage], exc: Exception) -> None:
        """Quarantine a batch whose handling failed; but if the store itself is away (Redis
        lost mid-turn: the failure was the store not answering, or the backend's own probe
        says so), nothing can be recorded: give the batch back to be run again once the
        store answers (its turn then finds a reply already stored, if there was one)."""
        error = f"{type(exc).__name__}: {exc}"
        backend = self.bus.backend
        if not self._store_away(exc):
            try:
                await self._give_up(batch, error)
                return
            except Exception:
                log.exception("could not record the failure of %s", batch[0].key)
        chat_key = batch[0].chat_key
        log.warning("%d message(s) of %s given back, to be run again when the store answers",
                    len(batch), chat_key)
        await asyncio.sleep(self.release_pause_s)  # the chat waits: never a hot retry loop
        if backend.owns(chat_key):  # still ours: before the chat's later messages, in order
            self._backlog.push_front(batch)
            self._executor.submit(chat_key, lambda: self._take_turn(chat_key))
        else:  # the chat moved: its new holder takes the entries over from the stream
            await self._give_back(batch)

    async def _give_back(self, batch: list[InboundMessage]) -> None:
        """Let go of a batch for the chat's holder to hand out again, and with it every
        later message of its chat still in this node's hands (queued or being grouped):
        kept here, those would be answered before the batch once it is handed out again.

        While this node still holds the chat (a run another node claimed under a lease this
        one has not yet seen expire), the store hands the batch straight back: the chat waits
        a moment first, never a hot loop."""
        chat_key = batch[0].chat_key
        if self.bus.backend.owns(chat_key):
            await asyncio.sleep(self.release_pause_s)
        later = self._backlog.drain(chat_key)
        if self._grouper is not None:
            later += self._grouper.drain(chat_key)
        await self.bus.inbound.release([*batch, *later])

    async def _give_up(self, batch: list[InboundMessage], error: str) -> None:
        """A journaled message whose handling failed (not the agent: that is a failed
        reply): quarantine it, finish it as failed, tell the sender."""
        for message in batch:
            await self.quarantine.record(message, IntakeStage.PROCESS, error)
        await self.replies.complete([m.key for m in batch], ReplyStatus.FAILED, error)
        self.failed_count += 1
        self._apologise(batch[-1])

    # -- runs left running, and messages the daemon writes itself ------------------------

    async def resume_runs(self) -> int:
        """Continue the runs left running in the chats this node owns (resuming.py)."""
        return await self.resumer.resume_runs()

    def publish_to_chat(self, chat: ChatRef, content: str,
                        announces: Announcement | None = None, *, reply_to: str | None = None,
                        inbound_key: str | None = None,
                        from_chat: str = "") -> Awaitable[list[bool]]:
        """Queue a message to a chat, split as the platform needs (replies.py); await the
        result where it must be stored before going on."""
        return self.replies.publish_to_chat(chat, content, announces, reply_to=reply_to,
                                            inbound_key=inbound_key, from_chat=from_chat)
