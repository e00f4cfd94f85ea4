"""The inbound pipeline: read → filter → journal → commit cursor → answer.

Per message: the adapter's priming history and messages not addressed to the bot are only
recorded as seen; reactions stop runs (and, later, decide approvals); users not on the
allow-list get one polite refusal; everything else is journaled before the adapter may
move its cursor, so a crash replays instead of losing, and the journal's seen ids stop a
second answer. Each chat is handled serially, different chats concurrently up to a bound.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from soulflow.agent.domain import AgentDomain, AgentReply
from soulflow.bus.bus import MessageBus
from soulflow.bus.messages import InboundMessage, OutboundMessage
from soulflow.bus.workers import KeyedSerialExecutor
from soulflow.channels.access import AccessPolicy, refusal_text
from soulflow.channels.base import ChannelAdapter
from soulflow.channels.commands import CommandRouter
from soulflow.channels.feedback import acknowledge, typing_while
from soulflow.channels.grouping import Grouper
from soulflow.channels.registry import ChannelRegistry
from soulflow.channels.rendering import render_reply
from soulflow.channels.runs import ActiveRuns

log = logging.getLogger(__name__)

EMPTY_MESSAGE_REPLY = "I received an empty message; write something and I'll answer."
STOP_REACTIONS = frozenset({"🛑", "⛔", "octagonal_sign", "no_entry", "stop_sign"})

EventSink = Callable[[str, dict[str, Any]], None]


class ChannelManager:
    def __init__(self, registry: ChannelRegistry, bus: MessageBus, agent: AgentDomain, *,
                 access: AccessPolicy, files_dir: Path, concurrency: int = 8,
                 max_inbound_chars: int = 100_000, grouping_window_s: float | None = None,
                 grouping_max: int = 5, on_event: EventSink | None = None) -> None:
        self.registry = registry
        self.bus = bus
        self.agent = agent
        self.access = access
        self.files_dir = files_dir
        self.max_inbound_chars = max_inbound_chars
        self.runs = ActiveRuns()
        self.commands = CommandRouter(stop_runs=self.runs.stop)
        self._executor = KeyedSerialExecutor("inbound", concurrency)
        self._grouper = (Grouper(grouping_window_s, grouping_max, self._submit)
                         if grouping_window_s else None)
        self._on_event = on_event or (lambda kind, data: None)
        self.received_count = 0
        self.answered_count = 0
        self.failed_count = 0

    # -- lifecycle -----------------------------------------------------------------------

    def resume_pending(self) -> int:
        """Re-queue messages the previous process accepted but did not finish."""
        pending = self.bus.inbound.pending()
        for message in pending:
            self._queue(message)
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

    async def stop(self, timeout: float) -> None:
        if self._grouper is not None:
            self._grouper.flush_all()
        await self._executor.close(timeout)

    @property
    def queued(self) -> int:
        return self._executor.pending + (self._grouper.buffered if self._grouper else 0)

    @property
    def active_chats(self) -> int:
        return self._executor.active_keys

    # -- intake --------------------------------------------------------------------------

    def ingest(self, adapter: ChannelAdapter, batch: list[InboundMessage]) -> list[InboundMessage]:
        """Journal what needs an answer, record the rest as seen, then let the adapter commit."""
        fresh: list[InboundMessage] = []
        seen_only: list[str] = []
        for message in batch:
            if self.bus.inbound.is_seen(message.key):
                continue
            if message.priming or message.from_bot:
                seen_only.append(message.key)
            elif message.kind == "reaction":
                seen_only.append(message.key)
                self._on_reaction(message)
            elif not (message.is_mention or message.is_direct):
                seen_only.append(message.key)
            elif not self.access.is_allowed(message.provider, message.sender_id):
                seen_only.append(message.key)
                self._refuse(message)
            elif self.bus.inbound.accept(message):
                fresh.append(message)
        self.bus.inbound.mark_seen(seen_only)
        adapter.commit(batch)
        for message in fresh:
            self.received_count += 1
            self._on_event("inbound.received", {
                "provider": message.provider, "chat_id": message.chat_id,
                "message_id": message.message_id, "sender_id": message.sender_id,
                "text": message.text[:500]})
            self._queue(message)
        return fresh

    def _queue(self, message: InboundMessage) -> None:
        if self._grouper is not None and message.provider != "local":
            self._grouper.add(message)
        else:
            self._submit([message])

    def _submit(self, batch: list[InboundMessage]) -> None:
        self._executor.submit(batch[0].chat_key, lambda: self._process(batch))

    def _on_reaction(self, message: InboundMessage) -> None:
        if message.reaction in STOP_REACTIONS and \
                self.access.is_allowed(message.provider, message.sender_id):
            stopped = self.runs.stop(message.chat_key)
            log.info("stop reaction in %s stopped %d run(s)", message.chat_key, stopped)

    def _refuse(self, message: InboundMessage) -> None:
        log.info("refused %s user %s (not on the allow-list)", message.provider,
                 message.sender_id)
        if self.access.should_explain_refusal(message.provider, message.sender_id):
            self._publish(message, refusal_text(message.provider, message.sender_id),
                          inbound_key=None)

    # -- answering -----------------------------------------------------------------------

    async def _process(self, batch: list[InboundMessage]) -> None:
        first, keys = batch[0], [m.key for m in batch]
        if any(self.bus.outbox.has_answered(k) for k in keys):  # crashed after replying
            self._complete(keys, "answered")
            return
        adapter = self.registry.get(first.provider)
        if len(batch) == 1 and adapter is not None and \
                (command := adapter.parse_command(first.text)) is not None:
            self._publish(first, await self.commands.handle(command, first))
            self._complete(keys, "answered")
            return
        text = await self._input_text(batch, adapter)
        if not text.strip():
            self._publish(first, EMPTY_MESSAGE_REPLY)
            self._complete(keys, "ignored", "empty message")
            return
        reply = await self._run_agent(batch, adapter, text)
        self._publish(batch[-1], reply.content, inbound_key=first.key)
        self._complete(keys, reply.status, reply.error)
        if reply.status == "answered":
            self.answered_count += 1
        else:
            self.failed_count += 1

    async def _input_text(self, batch: list[InboundMessage], adapter: ChannelAdapter | None
                          ) -> str:
        """The agent's input: the messages' text, attachments as local paths, cut to size."""
        parts = [m.text for m in batch if m.text]
        for message in batch:
            for attachment in message.attachments:
                parts.append(await self._attachment_line(adapter, message, attachment))
        text = "\n".join(parts)
        if len(text) > self.max_inbound_chars:
            note = (f"(Your message had {len(text):,} characters; I read the first "
                    f"{self.max_inbound_chars:,}.)")
            batch[0].metadata["truncation_note"] = note
            text = text[: self.max_inbound_chars]
        return text

    async def _attachment_line(self, adapter: ChannelAdapter | None, message: InboundMessage,
                               attachment: Any) -> str:
        if adapter is None:
            return f"[attachment {attachment.name}: not downloaded, no adapter]"
        try:
            path = await adapter.download(attachment, self.files_dir / message.provider)
        except Exception as exc:
            log.warning("could not download %s from %s: %s", attachment.name,
                        message.provider, exc)
            return f"[attachment {attachment.name}: could not be downloaded: {exc}]"
        attachment.local_path = str(path)
        return f"[attachment {attachment.name} saved at {path}]"

    async def _run_agent(self, batch: list[InboundMessage], adapter: ChannelAdapter | None,
                         text: str) -> AgentReply:
        first, last = batch[0], batch[-1]
        if adapter is not None:
            await acknowledge(adapter, last.chat_id, last.message_id)
        try:
            async with typing_while(adapter, first.chat_id):
                with self.runs.track(first.chat_key) as abort:
                    reply = await self.agent.respond(first, text, abort=abort)
        except Exception as exc:  # a bug must still end in a recorded failure, not silence
            log.exception("answering %s failed", first.key)
            reply = AgentReply("Sorry, something went wrong inside SoulFlow while answering; "
                               "the error is in the daemon's log.", "failed",
                               f"{type(exc).__name__}: {exc}")
        note = first.metadata.get("truncation_note")
        if note:
            reply.content = f"{note}\n\n{reply.content}"
        return reply

    def _complete(self, keys: list[str], status: str, error: str | None = None) -> None:
        for key in keys:
            self.bus.inbound.complete(key, status, error)

    def _publish(self, message: InboundMessage, content: str, *,
                 inbound_key: str | None = "") -> None:
        """Queue a reply, split or turned into a file as the platform needs, in order."""
        key = message.key if inbound_key == "" else inbound_key
        adapter = self.registry.get(message.provider)
        parts = render_reply(content, adapter.limits) if adapter is not None else []
        for part in parts or [None]:
            metadata: dict[str, Any] = {}
            if part is not None and part.as_file:
                metadata = {"as_file": True, "filename": part.filename, "note": part.note}
            self.bus.publish_outbound(OutboundMessage(
                provider=message.provider, chat_id=message.chat_id,
                content=part.text if part is not None else content,
                reply_to=message.message_id, thread_id=message.thread_id, inbound_key=key,
                metadata=metadata))
        self._on_event("agent.reply", {"provider": message.provider, "chat_id": message.chat_id,
                                       "reply_to": message.message_id, "text": content[:500]})
