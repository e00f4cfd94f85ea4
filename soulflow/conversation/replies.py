"""What a turn writes to the bus: replies (split for the platform, stored in order) and the
completion of the inbound messages it answered.

Every text the daemon sends to a chat comes through `publish_to_chat`, the one place a reply is
split for its platform: `split_reply` by the limits the chat's adapter declares (chunks under
its limit, numbered, or a file), each part an outbox message of its own that the adapter sends
as it is. A part is delivered, retried or dead-lettered on its own.

A reply is handed to the outbox writer (bus/dispatcher.py) at once, so the parts of one reply,
and the replies of one chat, keep their order whoever publishes them; the returned awaitable
tells when they are stored. A turn awaits it before completing the inbound message, so a
crash in between replays the message and finds it answered (`has_answered`), instead of
completing a message whose reply was never stored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass

from soulflow import tracing
from soulflow.bus.bus import MessageBus
from soulflow.channels.registry import ChannelRegistry
from soulflow.channels.splitting import split_reply
from soulflow.contracts import (
    Announcement,
    ChatRef,
    EventSink,
    InboundMessage,
    OutboundMessage,
    ReplyOptions,
    ReplyStatus,
)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class BusReplies:
    registry: ChannelRegistry
    bus: MessageBus
    on_event: EventSink

    def publish_to_chat(self, chat: ChatRef, content: str,
                        announces: Announcement | None = None, *, reply_to: str | None = None,
                        inbound_key: str | None = None,
                        from_chat: str = "") -> Awaitable[list[bool]]:
        """Queue a message, split or turned into a file as the platform needs, in order. The
        parts are stored by the outbox writer in this order; await the result where they must
        be stored before going on (callers that only notify may ignore it). Each part carries
        what the message `announces` and the chat whose message tool sent it (`from_chat`)."""
        provider, chat_id = chat.provider, chat.chat_id
        adapter = self.registry.get(provider)
        parts = split_reply(content, adapter.limits) if adapter is not None else []
        stored: list[asyncio.Future[bool]] = []
        trace = tracing.traceparent()  # the turn's: each part's delivery joins its trace
        for part in parts or [None]:
            stored.append(self.bus.publish_outbound(OutboundMessage(
                provider=provider, chat_id=chat_id,
                content=part.text if part is not None else content, reply_to=reply_to,
                thread_id=chat.thread_id, inbound_key=inbound_key,
                options=part.options if part is not None else ReplyOptions(),
                announces=announces, from_chat=from_chat, trace=trace)))
        self.on_event("agent.reply", {"provider": provider, "chat_id": chat_id,
                                      "reply_to": reply_to, "text": content[:500]})
        return asyncio.gather(*stored)

    def reply(self, message: InboundMessage, content: str, *, inbound_key: str | None = "",
              announces: Announcement | None = None) -> Awaitable[list[bool]]:
        """Queue a reply to `message` (answering `inbound_key`: by default the message itself,
        None for a reply that answers nothing, such as a refusal)."""
        return self.publish_to_chat(
            message.chat, content, announces, reply_to=message.message_id,
            inbound_key=message.key if inbound_key == "" else inbound_key)

    async def complete(self, keys: list[str], status: ReplyStatus,
                       error: str | None = None) -> None:
        """Record how the messages' turn ended; they are never handed out again."""
        for key in keys:
            done = await self.bus.inbound.complete(key, status, error)
            if str(done) == "fenced":  # Completion.FENCED: the chat moved while it ran here
                log.warning("completed %s after its chat moved to another node, which runs it "
                            "again (docs/scaling.md, the duplicate window)", key)
