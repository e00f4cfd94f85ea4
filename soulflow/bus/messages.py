"""Records that travel through the bus: what came in, what goes out, how a send ended."""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass, field, fields
from typing import Any


def new_id(prefix: str) -> str:
    """Short unique id with a readable prefix (ids appear in logs, the DLQ and the dashboard)."""
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


@dataclass(slots=True)
class Attachment:
    """A file that arrived with a message; only `local_path` ever enters the agent's context."""

    name: str
    local_path: str | None = None
    url: str | None = None
    mime_type: str | None = None
    size: int | None = None
    file_id: str | None = None  # the platform's handle, for adapters that download by id


@dataclass(slots=True)
class InboundMessage:
    """One message (or reaction) read from a channel, before any processing.

    `kind` is `message` or `reaction`; a reaction carries `reaction` (the emoji, as the
    platform names it) and `target_message_id` (the message reacted to), and a `message_id`
    unique to that reaction event. `priming` marks history read on a target's first read:
    it is recorded as seen and never answered.
    """

    provider: str
    chat_id: str
    message_id: str
    sender_id: str
    text: str
    sender_name: str = ""
    thread_id: str | None = None
    is_mention: bool = True
    is_direct: bool = False
    from_bot: bool = False
    attachments: list[Attachment] = field(default_factory=list)
    received_at: float = field(default_factory=time.time)
    metadata: dict[str, Any] = field(default_factory=dict)
    kind: str = "message"
    reaction: str | None = None
    target_message_id: str | None = None
    priming: bool = False

    @property
    def key(self) -> str:
        """Dedupe key, stable across restarts: `provider:chat:message_id`."""
        return f"{self.provider}:{self.chat_id}:{self.message_id}"

    @property
    def chat_key(self) -> str:
        """Serialisation key: work for one chat (or thread) runs in order."""
        return f"{self.provider}:{self.chat_id}"

    def to_dict(self) -> dict[str, Any]:
        record = {name: getattr(self, name) for name in _INBOUND_FIELDS}
        record["attachments"] = [asdict(a) for a in self.attachments]
        record["metadata"] = dict(self.metadata)
        return record

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> InboundMessage:
        data = dict(data)
        data["attachments"] = [Attachment(**a) for a in data.get("attachments") or []]
        return cls(**data)


@dataclass(slots=True)
class OutboundMessage:
    """One reply or notice to deliver to a chat; written to the outbox before any send."""

    provider: str
    chat_id: str
    content: str
    reply_to: str | None = None
    thread_id: str | None = None
    message_id: str = field(default_factory=lambda: new_id("out"))
    inbound_key: str | None = None
    created_at: float = field(default_factory=time.time)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def chat_key(self) -> str:
        return f"{self.provider}:{self.chat_id}"

    def to_dict(self) -> dict[str, Any]:
        record = {name: getattr(self, name) for name in _OUTBOUND_FIELDS}
        record["metadata"] = dict(self.metadata)
        return record

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OutboundMessage:
        return cls(**data)


# to_dict() copies fields directly: dataclasses.asdict deep-copies and was a hot spot
_INBOUND_FIELDS = tuple(f.name for f in fields(InboundMessage))
_OUTBOUND_FIELDS = tuple(f.name for f in fields(OutboundMessage))


@dataclass(slots=True)
class SendResult:
    """What a channel reports after delivering a message."""

    ok: bool = True
    platform_message_ids: list[str] = field(default_factory=list)


class SendError(Exception):
    """A channel could not deliver a message.

    `permanent` errors (invalid auth, unknown chat, rejected content) go straight to the DLQ;
    others are retried. `retry_after` (seconds) is the wait the platform asked for, if any.
    """

    def __init__(self, message: str, *, permanent: bool = False, retry_after: float | None = None):
        super().__init__(message)
        self.permanent = permanent
        self.retry_after = retry_after
