"""MessageBus: the durable journals and the dispatcher behind one object.

Everything here is a file under `runtime/bus/` and `runtime/dlq/`; the rest of the daemon only
calls these methods, so a shared backend (Redis Streams, NATS JetStream) can later replace the
files without touching channels or the agent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from soulflow.bus.dispatcher import EventSink, OutboundDispatcher, Sender
from soulflow.bus.dlq import DeadLetterQueue
from soulflow.bus.inbound import InboundJournal
from soulflow.bus.inbound_dlq import InboundDeadLetters
from soulflow.bus.messages import OutboundMessage
from soulflow.bus.outbox import Outbox
from soulflow.bus.retry import RetryPolicy

log = logging.getLogger(__name__)


class MessageBus:
    def __init__(
        self,
        runtime_dir: Path,
        *,
        fsync: str = "interval",
        policy: RetryPolicy | None = None,
        outbound_concurrency: int = 16,
        on_event: EventSink | None = None,
        clock: Callable[[], float] = time.time,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self.inbound = InboundJournal(runtime_dir / "bus" / "inbound.jsonl", fsync=fsync,
                                      clock=clock)
        self.outbox = Outbox(runtime_dir / "bus" / "outbox.jsonl", fsync=fsync, clock=clock)
        self.dlq = DeadLetterQueue(runtime_dir / "dlq" / "outbound.jsonl", clock=clock)
        # messages that could not be taken in (poison input), redacted: see inbound_dlq.py
        self.inbound_dlq = InboundDeadLetters(runtime_dir / "dlq" / "inbound.jsonl",
                                              redact=redact, clock=clock)
        self._senders: Callable[[str], Sender | None] = lambda provider: None
        self.dispatcher = OutboundDispatcher(
            self.outbox, self.dlq, lambda provider: self._senders(provider), policy=policy,
            concurrency=outbound_concurrency, clock=clock, on_event=on_event)

    def bind_senders(self, resolve: Callable[[str], Sender | None]) -> None:
        """Late binding: channels are built after the bus in the boot order."""
        self._senders = resolve

    def start(self) -> None:
        self.dispatcher.start()

    def publish_outbound(self, message: OutboundMessage) -> bool:
        return self.dispatcher.publish(message)

    def replay_dlq(self, message_ids: list[str] | None = None) -> int:
        """Put dead letters back in the outbox (all, or the given ids), then drop them."""
        letters = [e for e in self.dlq.entries()
                   if message_ids is None or e.message_id in message_ids]
        for letter in letters:
            self.publish_outbound(letter.to_outbound())
        self.dlq.remove(letter.message_id for letter in letters)
        return len(letters)

    def sync(self) -> None:
        """fsync the journals (safe from a worker thread)."""
        self.inbound.sync()
        self.outbox.sync()

    def compact_if_needed(self) -> None:
        """Rewrite journals that have grown; call from the event loop."""
        if self.inbound.needs_compaction:
            self.inbound.compact()
        if self.outbox.needs_compaction:
            self.outbox.compact()

    async def stop(self, timeout: float) -> None:
        await self.dispatcher.stop(timeout)

    def close(self) -> None:
        for journal in (self.inbound, self.outbox, self.dlq, self.inbound_dlq):
            journal.close()
