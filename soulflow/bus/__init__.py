"""Durable message bus: inbound journal, outbox, dispatcher and dead-letter queue."""

from soulflow.bus.bus import MessageBus
from soulflow.bus.messages import (
    Attachment,
    InboundMessage,
    OutboundMessage,
    SendError,
    SendResult,
)

__all__ = ["Attachment", "InboundMessage", "MessageBus", "OutboundMessage", "SendError",
           "SendResult"]
