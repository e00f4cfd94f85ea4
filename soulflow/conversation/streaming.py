"""A reply that appears in the chat while the model writes it (STREAM_REPLIES).

`ReplyStream` is the conversation's `AnswerStream` (agent/run/showing.py) for one turn: the run
feeds it the model's text as it arrives, and its task (`stream:<chat>`) shows that text as one
platform message, created when the first text arrives and then edited as the text grows
(`bus/stream_edits.py` plans the calls). Past the platform's length limit the text goes on in a
new message.

The first text is shown one interval after it arrives, so an answer the model completes
within that time (most short ones) goes out as one ordinary message, never edited.

The rules that keep a stream inside the platforms' limits:

- one call per `interval_s` (STREAM_EDIT_INTERVAL_S) per stream, and never sooner than the
  chat's own pace allows: the `ChatPacer` the outbox dispatcher paces the chat's replies by
  (bus/pacing.py). A 429 on an edit holds the chat's replies back too, and the other way round.
- no edit when the text has not changed;
- only redacted text is shown, minus a tail that may be a secret still being written
  (`Redactor.redact_growing`), and no tool-call text (the loop's filter holds it back).

Edits in between are best effort: a failed one is tried again at the next interval with the
newer text, and the final text is never one of them. The final text is the turn's reply, an
outbox entry like any other, which edits the pieces shown here (`BusReplies`, `edit_of`): it is
retried, paced, dead-lettered and delivered after a restart like every reply.

Crash safety comes from the run's journal: each piece's platform id is recorded there
(`ShownLeg.record`) the moment the platform returns it, and the same leg driven again after a
restart starts from those ids, so it edits the message already in the chat instead of sending a
second one. The narrow exception is a kill between the platform's answer and that record: the
piece is sent again (on Discord the create's nonce, derived from the leg, makes Discord return
the first message instead, within its window of a few minutes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from soulflow.agent.run.showing import ShownLeg
from soulflow.bus.pacing import ChatPacer, account_edits
from soulflow.bus.stream_edits import EditAction, EditKind, StreamPlan
from soulflow.channels.base import ChannelAdapter
from soulflow.contracts import ChatRef, OutboundMessage, ReplyOptions, SendError, new_id

log = logging.getLogger(__name__)

#: how long `close()` waits for a call in flight (its platform id must be recorded)
CLOSE_TIMEOUT_S = 30.0
#: calls of a chat's budget a stream leaves to the replies (Telegram group: 4 of 20 a minute)
CHAT_RESERVE = 4


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """STREAM_REPLIES and STREAM_EDIT_INTERVAL_S."""

    enabled: bool = True
    interval_s: float = 1.0


@dataclass(frozen=True, slots=True)
class ShownPieces:
    """What a stream left in the chat: each piece's platform id, and the text it holds ("" when
    not known, e.g. shown by a drive before a restart)."""

    ids: tuple[str, ...] = ()
    texts: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ReplyStreams:
    """Opens a turn's stream where streaming is on and the chat's channel can edit a reply."""

    settings: StreamSettings
    pacer: ChatPacer  # the outbox dispatcher's
    redact_growing: Callable[[str], str]

    def open(self, adapter: ChannelAdapter | None, chat: ChatRef,
             reply_to: str | None) -> ReplyStream | None:
        if not self.settings.enabled or adapter is None or not adapter.can_stream:
            return None
        return ReplyStream(adapter, chat, reply_to=reply_to, pacer=self.pacer,
                           interval_s=self.settings.interval_s,
                           redact_growing=self.redact_growing)


class ReplyStream:
    def __init__(self, adapter: ChannelAdapter, chat: ChatRef, *, reply_to: str | None,
                 pacer: ChatPacer, interval_s: float,
                 redact_growing: Callable[[str], str] = lambda text: text,
                 clock: Callable[[], float] = time.time) -> None:
        self._adapter = adapter
        self._chat = chat
        self._reply_to = reply_to
        self._pacer = pacer
        self._redact_growing = redact_growing
        self._clock = clock
        limit = max(1, adapter.limits.max_text)
        self._plan = StreamPlan(limit=limit, interval_s=interval_s)
        self._leg: ShownLeg | None = None
        self._ids: list[str] = []
        self._written = ""  # the current model call's text so far (unredacted)
        self._started = False  # some text arrived
        self._changed = asyncio.Event()  # new text, or closing
        self._closed = asyncio.Event()
        self._closing = False
        self._broken = False  # the platform refused a piece for good: stop showing
        self._task: asyncio.Task[None] | None = None  # started by the first text

    # -- AnswerStream (called by the run's loop) -------------------------------------------

    def begin(self, leg: ShownLeg) -> None:
        """The leg this stream shows; pieces an earlier drive showed are edited, not sent."""
        self._leg = leg
        self._ids = list(leg.shown)
        self._plan.shown = ["" for _ in leg.shown]  # what they hold is not known here

    def restart(self) -> None:
        self._written = ""

    def feed(self, text: str) -> None:
        if not self._started and text.strip():
            # the first text shows one interval after it arrives: an answer complete by
            # then goes out as one ordinary message, with no edit at all
            self._started = True
            self._plan.next_at = self._clock() + self._plan.interval_s
            if self._leg is not None and not self._closing:  # a turn with no text: no task
                self._task = asyncio.create_task(self._run(), name=f"stream:{self._chat.key}")
        self._written += text
        self._changed.set()

    # -- the end ---------------------------------------------------------------------------

    async def close(self) -> ShownPieces:
        """Stop showing (the final text is the reply's to deliver) and return what the chat
        holds. A call in flight is waited for, so its piece's id is known and recorded."""
        self._closing = True
        self._closed.set()
        self._changed.set()
        task, self._task = self._task, None
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), CLOSE_TIMEOUT_S)
            except TimeoutError:
                log.warning("stream of %s: a call did not end within %.0f s; not waited for",
                            self._chat.key, CLOSE_TIMEOUT_S)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        return ShownPieces(tuple(self._ids), tuple(self._plan.shown))

    # -- the task --------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while not self._closing and not self._broken:
                self._changed.clear()
                self._plan.update(self._redact_growing(self._written))
                wait = self._ready_at() - self._clock()
                if wait > 0:
                    await self._sleep(min(wait, 60.0))  # a full budget: look again later
                    continue
                action = self._plan.due(self._clock())
                if action is None:
                    await self._changed.wait()
                    continue
                await self._carry_out(action)
        except asyncio.CancelledError:
            raise
        except Exception:  # showing is best effort: the reply still goes out in full
            log.exception("stream of %s failed; the reply is sent when it is complete",
                          self._chat.key)

    def _ready_at(self) -> float:
        """When the stream may make its next call: its interval, the chat's pace and budget
        (leaving `CHAT_RESERVE` to the replies), and room in the account's edit budget for
        half of it (the other half is the streamed replies' final edits')."""
        adapter, chat = self._adapter, self._chat
        ready = max(self._plan.next_at, self._pacer.ready_at(
            chat.key, adapter.send_interval_s, adapter.chat_budget(chat.chat_id),
            reserve=CHAT_RESERVE))
        if adapter.edit_budget is not None:
            ready = max(ready, self._pacer.ready_at(
                account_edits(chat.provider), 0.0, adapter.edit_budget,
                reserve=adapter.edit_budget.calls // 2))
        return ready

    async def _sleep(self, seconds: float) -> None:
        """Wait, but wake when the stream closes."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closed.wait(), seconds)

    async def _carry_out(self, action: EditAction) -> None:
        assert self._leg is not None
        base = f"st_{self._leg.run_id}_{self._leg.leg}_{action.index}"
        edit_of = self._ids[action.index] if action.kind is EditKind.EDIT else ""
        message = OutboundMessage(
            provider=self._chat.provider, chat_id=self._chat.chat_id, content=action.text,
            reply_to=self._reply_to, thread_id=self._chat.thread_id,
            # a piece's create has the same id in every drive of the leg (Discord's nonce)
            message_id=base if not edit_of else new_id(f"{base}_e"),
            options=ReplyOptions(edit_of=edit_of, partial=True))
        try:
            result = await self._adapter.send(message)
        except SendError as exc:
            now = self._clock()
            if exc.retry_after is not None:
                self._pacer.hold(self._chat.key, exc.retry_after)
                self._plan.throttled(exc.retry_after, now)
            elif exc.permanent:  # e.g. a piece the platform measures as too long
                log.info("stream of %s: the platform refused a piece (%s); the reply is sent "
                         "when it is complete", self._chat.key, exc)
                self._broken = True
            else:  # a transient failure: the next interval tries the newer text
                log.debug("stream of %s: %s failed (%s)", self._chat.key, action.kind.value,
                          exc)
                self._plan.throttled(0.0, now)
            return
        self._pacer.sent(self._chat.key, self._adapter.chat_budget(self._chat.chat_id))
        if action.kind is EditKind.EDIT and self._adapter.edit_budget is not None:
            self._pacer.counted(account_edits(self._chat.provider), self._adapter.edit_budget)
        platform_id = next(iter(result.platform_message_ids), edit_of)
        if action.kind is EditKind.SEND:
            self._ids.append(platform_id)
            self._leg.record(action.index, platform_id)
        elif platform_id and platform_id != edit_of:  # the message was gone: posted anew
            self._ids[action.index] = platform_id
            self._leg.record(action.index, platform_id)
        self._plan.done(action, self._clock())
