"""The inbound pipeline: read → drop bots → dedupe + journal → commit cursor → answer.

A message is journaled before its adapter may move its cursor, so a crash in between replays
it (and the journal's seen ids stop a second answer) instead of losing it. Each chat is
handled serially, different chats concurrently up to a bound.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from soulflow.agent.domain import AgentDomain, AgentReply
from soulflow.bus.bus import MessageBus
from soulflow.bus.messages import InboundMessage, OutboundMessage
from soulflow.bus.workers import KeyedSerialExecutor
from soulflow.channels.base import ChannelAdapter
from soulflow.channels.registry import ChannelRegistry

log = logging.getLogger(__name__)

EMPTY_MESSAGE_REPLY = "I received an empty message; write something and I'll answer."

EventSink = Callable[[str, dict[str, Any]], None]


class ChannelManager:
    def __init__(self, registry: ChannelRegistry, bus: MessageBus, agent: AgentDomain, *,
                 concurrency: int = 8, max_inbound_chars: int = 100_000,
                 on_event: EventSink | None = None) -> None:
        self.registry = registry
        self.bus = bus
        self.agent = agent
        self.max_inbound_chars = max_inbound_chars
        self._executor = KeyedSerialExecutor("inbound", concurrency)
        self._on_event = on_event or (lambda kind, data: None)
        self.received_count = 0
        self.answered_count = 0
        self.failed_count = 0

    # -- lifecycle -----------------------------------------------------------------------

    def resume_pending(self) -> int:
        """Re-queue messages the previous process accepted but did not finish."""
        pending = self.bus.inbound.pending()
        for message in pending:
            self._executor.submit(message.chat_key, lambda m=message: self._process(m))
        if pending:
            log.info("resuming %d inbound message(s) left unfinished by the last run",
                     len(pending))
        return len(pending)

    async def read_loop(self, adapter: ChannelAdapter) -> None:
        """One adapter's reader; runs as a supervised task until cancelled."""
        while True:
            batch = await adapter.read()
            if batch:
                self.ingest(adapter, batch)

    def ingest(self, adapter: ChannelAdapter, batch: list[InboundMessage]) -> list[InboundMessage]:
        """Journal new messages, let the adapter commit its cursor, queue the work."""
        fresh = [m for m in batch if not m.from_bot and self.bus.inbound.accept(m)]
        adapter.commit(batch)
        for message in fresh:
            self.received_count += 1
            self._on_event("inbound.received", {
                "provider": message.provider, "chat_id": message.chat_id,
                "message_id": message.message_id, "sender_id": message.sender_id,
                "text": message.text[:500]})
            self._executor.submit(message.chat_key, lambda m=message: self._process(m))
        return fresh

    async def stop(self, timeout: float) -> None:
        await self._executor.close(timeout)

    @property
    def queued(self) -> int:
        return self._executor.pending

    @property
    def active_chats(self) -> int:
        return self._executor.active_keys

    # -- processing ----------------------------------------------------------------------

    async def _process(self, message: InboundMessage) -> None:
        inbound = self.bus.inbound
        if self.bus.outbox.has_answered(message.key):  # crashed after replying, before "done"
            inbound.complete(message.key, "answered")
            return
        text = message.text
        if not text.strip():
            self._reply(message, EMPTY_MESSAGE_REPLY)
            inbound.complete(message.key, "ignored", "empty message")
            return
        notice = ""
        if len(text) > self.max_inbound_chars:
            notice = (f"(Your message had {len(text):,} characters; I read the first "
                      f"{self.max_inbound_chars:,}.)\n\n")
            text = text[: self.max_inbound_chars]
        adapter = self.registry.get(message.provider)
        await self._typing(adapter, message, True)
        try:
            reply = await self.agent.respond(message, text)
        except Exception as exc:  # a bug must still end in a recorded failure, not silence
            log.exception("answering %s failed", message.key)
            reply = AgentReply("Sorry, something went wrong inside SoulFlow while answering; "
                               "the error is in the daemon's log.", "failed",
                               f"{type(exc).__name__}: {exc}")
        finally:
            await self._typing(adapter, message, False)
        self._reply(message, notice + reply.content)
        inbound.complete(message.key, reply.status, reply.error)
        if reply.status == "answered":
            self.answered_count += 1
        else:
            self.failed_count += 1

    def _reply(self, message: InboundMessage, content: str) -> None:
        outbound = OutboundMessage(provider=message.provider, chat_id=message.chat_id,
                                   content=content, reply_to=message.message_id,
                                   thread_id=message.thread_id, inbound_key=message.key)
        self.bus.publish_outbound(outbound)
        self._on_event("agent.reply", {"provider": message.provider, "chat_id": message.chat_id,
                                       "reply_to": message.message_id,
                                       "text": content[:500]})

    @staticmethod
    async def _typing(adapter: ChannelAdapter | None, message: InboundMessage, on: bool) -> None:
        if adapter is None:
            return
        try:
            await adapter.set_typing(message.chat_id, on)
        except Exception as exc:  # typing is cosmetic; never fail the reply for it
            log.debug("typing indicator failed on %s: %s", message.provider, exc)
