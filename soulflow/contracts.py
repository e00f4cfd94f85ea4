"""Shared records and protocols: the vocabulary every layer may import.

This module sits at the bottom of the import graph and imports nothing of soulflow, so a store
(`cron`, `security`), the agent, the bus and the channels can all speak of the same message,
chat, model turn and status without importing each other (tests/unit/test_import_graph.py
holds the layer table). `soulflow.bus.messages` and `soulflow.providers.base` re-export the
names that used to live there.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "ApprovalNeed",
    "Attachment",
    "ChatRef",
    "CronRunStatus",
    "DeadLetter",
    "EventSink",
    "InboundDeadLetter",
    "InboundMessage",
    "IntakeStage",
    "OutboundMessage",
    "OutboxEntry",
    "Provider",
    "ProviderError",
    "ProviderResult",
    "QUIET_TURN_ORIGIN",
    "ReplyStatus",
    "SendError",
    "SendResult",
    "StreamCallback",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "new_id",
]


def new_id(prefix: str) -> str:
    """Short unique id with a readable prefix (ids appear in logs, the DLQ and the dashboard)."""
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


# -- statuses ----------------------------------------------------------------------------


class ReplyStatus(StrEnum):
    """How one message's turn ended: `AgentReply.status` and the inbound journal's `done` status.

    A `StrEnum`, so the journal and session files keep the plain words they always held and an
    old record compares equal to its member. `MAX_TURNS` is a run that stopped at its turn limit
    with a best-effort answer: counted on its own, never as `ANSWERED`.
    """

    ANSWERED = "answered"
    MAX_TURNS = "max_turns"
    WAITING_APPROVAL = "waiting_approval"
    WAITING_USER = "waiting_user"
    CANCELLED = "cancelled"
    FAILED = "failed"
    REFUSED = "refused"
    IGNORED = "ignored"


class CronRunStatus(StrEnum):
    """The result of a cron job's last run; an error's text is kept beside it (`last_error`)."""

    OK = "ok"
    ERROR = "error"


# -- chats -------------------------------------------------------------------------------

QUIET_TURN_ORIGIN = "quiet_turn"
"""`ChatRef.origin` of a run nobody typed (the heartbeat, a quiet cron job): it has its own
session and its own chat zone (soulflow/security/zones.py), never a person's."""


@dataclass(frozen=True, slots=True)
class ChatRef:
    """One chat (and thread) and, for a run, who asked: the single chat type end to end.

    `requester_id` binds a run's approvals to that person (empty when nobody in the chat asked:
    a cron job, a heartbeat); `session_key` is the session a run's turns are recorded in;
    `origin` marks runs started by a background service (recovery and the ops watchdog use it);
    `task_id`/`node_id` mark a task step's run. A run records it with `to_dict()` in its first
    event and reads it back with `from_dict()`.
    """

    provider: str
    chat_id: str
    thread_id: str | None = None
    sender_id: str = ""
    sender_name: str = ""
    requester_id: str = ""
    session_key: str = ""
    origin: str = ""
    task_id: str = ""  # a task step's run (soulflow/tasks): the task engine drives it
    node_id: str = ""

    @property
    def key(self) -> str:
        """Same form as `InboundMessage.chat_key`; per-chat limits, listings and runs use it."""
        return f"{self.provider}:{self.chat_id}"

    def where(self) -> ChatRef:
        """Only the place (provider, chat, thread): what a reply or a job needs."""
        return ChatRef(self.provider, self.chat_id, self.thread_id)

    def place_dict(self) -> dict[str, Any]:
        """Only the place, as cron jobs and heartbeat targets store it."""
        return {"provider": self.provider, "chat_id": self.chat_id, "thread_id": self.thread_id}

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _CHAT_FIELDS}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ChatRef:
        """Tolerant of old records: missing fields are empty, unknown ones ignored, and a run
        recorded before `requester_id` existed belongs to its sender."""
        data = data or {}
        thread = data.get("thread_id")
        requester = data.get("requester_id", data.get("sender_id"))
        return cls(str(data.get("provider") or ""), str(data.get("chat_id") or ""),
                   None if thread in (None, "") else str(thread),
                   sender_id=str(data.get("sender_id") or ""),
                   sender_name=str(data.get("sender_name") or ""),
                   requester_id=str(requester or ""),
                   session_key=str(data.get("session_key") or ""),
                   origin=str(data.get("origin") or ""),
                   task_id=str(data.get("task_id") or ""),
                   node_id=str(data.get("node_id") or ""))


_CHAT_FIELDS = tuple(f.name for f in fields(ChatRef))


# -- messages ----------------------------------------------------------------------------


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

    @property
    def chat(self) -> ChatRef:
        """Where this message came from (the place only; runs add the person)."""
        return ChatRef(self.provider, self.chat_id, self.thread_id)

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


EventSink = Callable[[str, dict[str, Any]], None]
"""`on_event(kind, data)`: where the bus and the channels publish a live event (the daemon
counts it, then hands it to the dashboard's event hub)."""


# -- what the bus's stores keep ----------------------------------------------------------


@dataclass(slots=True)
class OutboxEntry:
    """A reply in the outbox and how its delivery stands."""

    message: OutboundMessage
    attempts: int = 0
    next_at: float = 0.0
    last_error: str = ""
    in_flight: bool = False  # a send began and never reported back (killed mid-send?)


@dataclass(slots=True)
class DeadLetter:
    """A reply that could not be delivered, kept whole for replay: one line of
    `runtime/dlq/outbound.jsonl` (`at, provider, chat_id, message_id, reply_to, thread_id,
    retry_count, error, content, metadata`)."""

    at: float
    provider: str
    chat_id: str
    message_id: str
    reply_to: str | None
    thread_id: str | None
    retry_count: int
    error: str
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_outbound(cls, message: OutboundMessage, *, retry_count: int, error: str,
                      at: float) -> DeadLetter:
        metadata = dict(message.metadata)
        if message.inbound_key:
            metadata.setdefault("inbound_key", message.inbound_key)
        return cls(at, message.provider, message.chat_id, message.message_id, message.reply_to,
                   message.thread_id, retry_count, error, message.content, metadata)

    def to_outbound(self) -> OutboundMessage:
        metadata = {k: v for k, v in self.metadata.items() if k != "inbound_key"}
        metadata["replayed_from_dlq_at"] = self.at
        return OutboundMessage(provider=self.provider, chat_id=self.chat_id, content=self.content,
                               reply_to=self.reply_to, thread_id=self.thread_id,
                               message_id=self.message_id, metadata=metadata)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class IntakeStage(StrEnum):
    """Where taking a message in failed."""

    PARSE = "parse"  # the adapter could not turn the platform's update into a message
    NORMALISE = "normalise"
    SEAL = "seal"
    JOURNAL = "journal"
    INTAKE = "intake"  # filtering, reactions, refusals
    PROCESS = "process"  # commands, input building: an error before the agent's answer


@dataclass(slots=True)
class InboundDeadLetter:
    """A message that could not be taken in, kept (redacted) for the operator: one line of
    `runtime/dlq/inbound.jsonl` (`at, provider, chat_id, message_id, sender_id, stage, error,
    content, raw, key`)."""

    at: float
    provider: str
    chat_id: str
    message_id: str
    sender_id: str
    stage: str
    error: str
    content: str
    raw: str = ""
    key: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> InboundDeadLetter:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


# -- model turns -------------------------------------------------------------------------

StreamCallback = Callable[[str], Awaitable[None] | None]


@dataclass(slots=True)
class ToolCall:
    """A tool call requested by the model (`arguments` already parsed from JSON when possible)."""

    id: str
    name: str
    arguments: dict[str, Any] | str


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


@dataclass(slots=True)
class ProviderResult:
    """A model turn: text content and/or tool calls."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    provider: str = ""
    model: str = ""


class ProviderError(Exception):
    """A provider failed. `kind` is a short normalised category shown to users and in logs.

    kinds: `not_configured`, `auth`, `rate_limited`, `server`, `timeout`, `network`,
    `bad_response`, `aborted`, `bad_request`.
    """

    def __init__(self, kind: str, message: str, *, provider: str = "", status: int | None = None):
        super().__init__(message)
        self.kind = kind
        self.provider = provider
        self.status = status

    @property
    def retryable(self) -> bool:
        return self.kind in {"rate_limited", "server", "timeout", "network"}

    def __str__(self) -> str:
        prefix = f"{self.provider}: " if self.provider else ""
        return f"{prefix}{self.kind}: {self.args[0]}"


class Provider(Protocol):
    """What the agent needs from a model backend. Errors are raised (`ProviderError`), never
    returned as content, so callers can tell a model's answer from a failure."""

    name: str

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                   *, on_stream: StreamCallback | None = None,
                   abort: asyncio.Event | None = None) -> ProviderResult: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ApprovalNeed:
    """Why a tool call needs a person's yes before it runs, and whose yes counts.

    An ordinary approval may be given by the person who asked (the run's requester), an admin
    (``<PLATFORM>_ADMIN_USERS``) or the local operator. ``admins_only`` is for a call the
    requester must not wave through herself - a change to the operator's files (templates,
    skills, global memory: what every other chat's runs load), an unconfined ``exec`` - which
    only an admin or the local operator may approve. ``reason`` is shown to the deciders; it
    is computed from the arguments as the model wrote them, so it never holds a secret value.
    """

    reason: str
    admins_only: bool = False

    @classmethod
    def of(cls, value: str | ApprovalNeed | None) -> ApprovalNeed | None:
        """What a tool's ``needs_approval`` returned, as one type: a bare reason is an
        ordinary approval, None or "" is none."""
        if isinstance(value, ApprovalNeed):
            return value
        return cls(value) if value else None


@runtime_checkable
class ToolSpec(Protocol):
    """What the model and the approval flow see of a tool (`soulflow.agent.tools.base.Tool`
    implements it). `ctx` is the agent's `ToolContext`; typed loosely here because the context
    carries agent-level services this module must not know."""

    name: str
    description: str
    parameters: dict[str, Any]
    idempotent: bool

    def needs_approval(self, params: dict[str, Any], ctx: Any) -> str | ApprovalNeed | None:
        """A reason (an ordinary approval), an `ApprovalNeed`, or None when none is needed."""

    async def run(self, params: dict[str, Any], ctx: Any) -> str: ...

    def schema(self) -> dict[str, Any]: ...
