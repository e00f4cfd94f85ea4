"""What a turn writes to the bus: replies (split for the platform, stored in order) and the
completion of the inbound messages it answered.

Every text the daemon sends to a chat comes through `publish_to_chat`, the one place a reply is
split for its platform: `split_reply` by the limits the chat's adapter declares (chunks under
its limit, numbered, or a file), each part an outbox message of its own that the adapter sends
as it is. A part is delivered, retried or dead-lettered on its own.

A streamed reply (conversation/streaming.py) is already in the chat as one or more messages:
its parts edit those (`edit_of`, in order) instead of being sent anew, a part whose message
already holds its text is stored but not sent (`shown`), and a part beyond them is a new
message. A piece left over (the final text is shorter than what was streamed) is emptied to
an ellipsis, since platforms cannot unsend without a trace.

A reply is handed to the outbox writer (bus/writer.py) at once, so the parts of one reply,
and the replies of one chat, keep their order whoever publishes them; the returned awaitable
tells when they are stored. A turn's completion of its inbound messages goes to the same
writer, behind its reply (`answer`): it is stored after the reply, in the same round trip on
Redis, so a crash in between replays the message and finds it answered (`has_answered`),
and a message is never completed while its reply is not stored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, replace

from soulflow import tracing
from soulflow.bus.bus import MessageBus
from soulflow.channels.registry import ChannelRegistry
from soulflow.channels.splitting import ReplyPart, split_reply
from soulflow.contracts import (
    Announcement,
    ChatRef,
    EventSink,
    InboundMessage,
    OutboundMessage,
    ReplyStatus,
)
from soulflow.conversation.streaming import ShownPieces

#: what a streamed piece holds when the final text no longer reaches it
LEFT_OVER_PIECE = "…"

log = logging.getLogger(__name__)


@dataclass(slots=True)
class BusReplies:
    registry: ChannelRegistry
    bus: MessageBus
    on_event: EventSink

    def publish_to_chat(self, chat: ChatRef, content: str,
                        announces: Announcement | None = None, *, reply_to: str | None = None,
                        inbound_key: str | None = None, from_chat: str = "",
                        shown: ShownPieces | None = None) -> Awaitable[list[bool]]:
        """Queue a message, split or turned into a file as the platform needs, in order. The
        parts are stored by the outbox writer in this order; await the result where they must
        be stored before going on (callers that only notify may ignore it). Each part carries
        what the message `announces` and the chat whose message tool sent it (`from_chat`).
        `shown`: the messages a stream of this reply left in the chat, which the parts edit."""
        provider, chat_id = chat.provider, chat.chat_id
        adapter = self.registry.get(provider)
        parts = split_reply(content, adapter.limits) if adapter is not None else []
        stored: list[asyncio.Future[bool]] = []
        trace = tracing.traceparent()  # the turn's: each part's delivery joins its trace
        confirm = adapter is not None and adapter.confirms_final_text
        for part in over_shown(parts or [ReplyPart(content)], shown or ShownPieces(),
                               skip_unchanged=not confirm):
            stored.append(self.bus.publish_outbound(OutboundMessage(
                provider=provider, chat_id=chat_id, content=part.text, reply_to=reply_to,
                thread_id=chat.thread_id, inbound_key=inbound_key, options=part.options,
                announces=announces, from_chat=from_chat, trace=trace)))
        self.on_event("agent.reply", {"provider": provider, "chat_id": chat_id,
                                      "reply_to": reply_to, "text": content[:500]})
        return asyncio.gather(*stored)

    def reply(self, message: InboundMessage, content: str, *, inbound_key: str | None = "",
              announces: Announcement | None = None,
              shown: ShownPieces | None = None) -> Awaitable[list[bool]]:
        """Queue a reply to `message` (answering `inbound_key`: by default the message itself,
        None for a reply that answers nothing, such as a refusal)."""
        return self.publish_to_chat(
            message.chat, content, announces, reply_to=message.message_id,
            inbound_key=message.key if inbound_key == "" else inbound_key, shown=shown)

    async def complete(self, keys: list[str], status: ReplyStatus,
                       error: str | None = None) -> None:
        """Record how the messages' turn ended; they are never handed out again. Recorded
        behind every reply published before, so a turn queues its reply and completes
        without waiting in between (`answer`)."""
        ended = await self.bus.complete_inbound(keys, status, error)
        for key, done in zip(keys, ended, strict=True):
            if str(done) == "fenced":  # Completion.FENCED: the chat moved while it ran here
                log.warning("completed %s after its chat moved to another node, which runs it "
                            "again (docs/scaling.md, the duplicate window)", key)

    async def answer(self, message: InboundMessage, content: str, keys: list[str],
                     status: ReplyStatus, error: str | None = None, *,
                     inbound_key: str | None = "", announces: Announcement | None = None,
                     shown: ShownPieces | None = None) -> None:
        """Reply to `message` and complete `keys` in one go: the completion is queued right
        behind the reply's parts, so both are stored together, the reply first."""
        stored = self.reply(message, content, inbound_key=inbound_key, announces=announces,
                            shown=shown)
        try:
            await self.complete(keys, status, error)
        finally:
            await asyncio.gather(stored, return_exceptions=True)  # done by now, or cancelled


def over_shown(parts: list[ReplyPart], shown: ShownPieces, *,
               skip_unchanged: bool = True) -> list[ReplyPart]:
    """The parts, each text part in turn editing the next streamed piece, then the pieces no
    part reached, emptied (a file cannot replace a text message: it goes as a new one). With
    `skip_unchanged`, a part its message already holds is marked `shown` (not sent)."""
    result: list[ReplyPart] = []
    used = 0
    for part in parts:
        if used < len(shown.ids) and not part.options.as_file:
            result.append(_editing(part, shown, used, skip_unchanged))
            used += 1
        else:
            result.append(part)
    result += [_editing(ReplyPart(LEFT_OVER_PIECE), shown, index, skip_unchanged)
               for index in range(used, len(shown.ids))]
    return result


def _editing(part: ReplyPart, shown: ShownPieces, index: int,
             skip_unchanged: bool) -> ReplyPart:
    held = shown.texts[index] if index < len(shown.texts) else ""
    return ReplyPart(part.text, replace(part.options, edit_of=shown.ids[index],
                                        shown=skip_unchanged and held == part.text))
