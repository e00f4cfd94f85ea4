"""Shared records and protocols: the vocabulary every layer may import.

This module sits at the bottom of the import graph and imports nothing of soulflow but the
exception root (`soulflow.errors`, which imports nothing), so a store
(`cron`, `security`), the agent, the bus and the channels can all speak of the same message,
chat, model turn and status without importing each other (tests/unit/test_import_graph.py
holds the layer table). Every module imports these names from here; no other module
re-exports them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, fields, replace
from enum import StrEnum
from typing import Any, ClassVar, Protocol, runtime_checkable

from soulflow.errors import SoulFlowError

__all__ = [
    "Announcement",
    "ApprovalNeed",
    "ApprovalRef",
    "Attachment",
    "ChatRef",
    "CronOccurrence",
    "CronRunStatus",
    "DeadLetter",
    "Delivery",
    "EventSink",
    "InboundDeadLetter",
    "InboundMessage",
    "IntakeStage",
    "OutboundMessage",
    "OutboxEntry",
    "Poison",
    "Provider",
    "ProviderError",
    "ProviderResult",
    "QUIET_TURN_ORIGIN",
    "ReplyOptions",
    "ReplyStatus",
    "SendError",
    "SendResult",
    "StreamCallback",
    "TaskStatusRef",
    "TaskStepRef",
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


# -- what rides with a message across layers ---------------------------------------------
#
# Stored, these sit under a message's `metadata` key with the words the files and Redis have
# always held; each record reads and writes its own keys (`to_dict`, `from_dict`), and the
# message puts them together. docs/development.md ("One type per idea") says who writes and
# who reads each one.


@dataclass(frozen=True, slots=True)
class ReplyOptions:
    """How an adapter sends one outbox message (`OutboundMessage.options`).

    `as_file`: the text goes as a `.txt` attachment named `filename` with `note` as its caption
    (the one split turns an overlong reply into one: channels/splitting.py). `thread_reply`:
    answer in the thread of `reply_to` rather than beside it (Slack).

    `edit_of`: the platform id of a message the bot already sent (a streamed reply's piece,
    conversation/streaming.py) whose text this one replaces in place: the adapter edits that
    message instead of posting a new one. `shown`: that message already holds exactly this
    text (the stream's last edit), so nothing is sent; the entry is stored all the same, so
    the reply is durable and answered like any other. `partial`: an in-between piece of a
    streamed reply, whose final text follows (the local transcript marks it, so its readers
    know when a reply is whole).
    """

    as_file: bool = False
    filename: str = ""
    note: str = ""
    thread_reply: bool = False
    edit_of: str = ""
    shown: bool = False
    partial: bool = False

    def to_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {}
        if self.as_file:
            record.update(as_file=True, filename=self.filename, note=self.note)
        if self.thread_reply:
            record["thread_reply"] = True
        if self.edit_of:
            record["edit_of"] = self.edit_of
            if self.shown:
                record["shown"] = True
        if self.partial:
            record["partial"] = True
        return record

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> ReplyOptions:
        if not _OPTION_KEYS.intersection(record):
            return _AS_TEXT
        return cls(bool(record.get("as_file")), str(record.get("filename") or ""),
                   str(record.get("note") or ""), bool(record.get("thread_reply")),
                   str(record.get("edit_of") or ""), bool(record.get("shown")),
                   bool(record.get("partial")))


_OPTION_KEYS = frozenset({"as_file", "thread_reply", "edit_of", "partial"})


_AS_TEXT = ReplyOptions()  # shared: what almost every message is, read without building it


@dataclass(frozen=True, slots=True)
class ApprovalRef:
    """The approval a run waits for, named in the message that asks for it: the platform ids
    the message gets are remembered (`ApprovalMap`), so a reaction on it decides the approval."""

    run_id: str
    approval_id: str

    def to_dict(self) -> dict[str, Any]:
        return {"approval_id": self.approval_id, "run_id": self.run_id}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> ApprovalRef | None:
        if "approval_id" not in record:
            return None
        return cls(str(record.get("run_id") or ""), str(record["approval_id"]))


@dataclass(frozen=True, slots=True)
class TaskStepRef:
    """A task step waiting for a person (a gate, a tool call to approve, a step a restart cut
    short), named in the message that asks: a reaction on that message decides the step."""

    task_id: str
    node_id: str

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "node_id": self.node_id}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> TaskStepRef | None:
        if "task_id" not in record or "node_id" not in record:
            return None
        return cls(str(record["task_id"]), str(record["node_id"]))


@dataclass(frozen=True, slots=True)
class TaskStatusRef:
    """A task's status message: once it is delivered, later updates edit it in place."""

    task_id: str

    def to_dict(self) -> dict[str, Any]:
        return {"task_status": self.task_id}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> TaskStatusRef | None:
        return cls(str(record["task_status"])) if "task_status" in record else None


Announcement = ApprovalRef | TaskStepRef | TaskStatusRef
"""What an outbox message announces (`OutboundMessage.announces`): a listener of sent messages
remembers the platform ids it got, for the reaction that answers it or the edit that updates
it."""


def _announcement(record: dict[str, Any]) -> Announcement | None:
    return (ApprovalRef.from_dict(record) or TaskStepRef.from_dict(record)
            or TaskStatusRef.from_dict(record))


@dataclass(frozen=True, slots=True)
class Delivery:
    """What happened to a message before this send, as its adapter must know it.

    `maybe_sent`: a send began and never reported back (the process died during it), so the
    platform may have the message already; an adapter that can look (Slack) looks before it
    sends again. It stays with the message, through the DLQ and a replay. `replayed_from_dlq_at`:
    the operator put it back from the DLQ (the time of its dead letter).
    """

    maybe_sent: bool = False
    replayed_from_dlq_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {}
        if self.maybe_sent:
            record["maybe_sent"] = True
        if self.replayed_from_dlq_at is not None:
            record["replayed_from_dlq_at"] = self.replayed_from_dlq_at
        return record

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Delivery:
        replayed = record.get("replayed_from_dlq_at")
        if replayed is None and "maybe_sent" not in record:
            return _UNTRIED
        return cls(bool(record.get("maybe_sent")),
                   replayed if isinstance(replayed, int | float) else None)


_UNTRIED = Delivery()

_TRACE_KEY = "traceparent"  # a message's trace (soulflow/tracing): the W3C header's name
_TOOL_ORIGIN = "tool:message"  # `origin` of a message the agent's message tool sent


@dataclass(frozen=True, slots=True)
class CronOccurrence:
    """The cron job occurrence that wrote a message (`InboundMessage.cron`). Nobody in the chat
    sent it: it is never a command, a decision or folded with others, and its run has no
    requester to bind approvals to."""

    KEYS: ClassVar[tuple[str, ...]] = ("origin", "cron_job_id", "scheduled_at")

    job_id: str
    scheduled_at: str  # ISO 8601, the time the occurrence was due

    def to_dict(self) -> dict[str, Any]:
        return {"origin": "cron", "cron_job_id": self.job_id, "scheduled_at": self.scheduled_at}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> CronOccurrence | None:
        if record.get("origin") != "cron":
            return None
        return cls(str(record.get("cron_job_id") or ""), str(record.get("scheduled_at") or ""))


@dataclass(frozen=True, slots=True)
class Poison:
    """Why an adapter could not read a platform update, and the update as received (cut, not
    redacted yet: the inbound DLQ redacts it), on the message the adapter put in its place
    (`channels/poison.py`); the intake quarantines it."""

    KEYS: ClassVar[tuple[str, ...]] = ("poison_error", "raw")

    error: str
    raw: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"poison_error": self.error, "raw": self.raw}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Poison | None:
        if "poison_error" not in record:
            return None
        raw = record.get("raw")
        return cls(str(record["poison_error"]), raw if isinstance(raw, str) else None)


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

    `thread_context`: the thread's earlier lines an adapter attached for the agent (sealed by
    the intake like the text; None when it attached none). `cron`: the job occurrence that
    wrote it. `poison`: an update the adapter could not read. `platform_data`: what the adapter
    that read the message keeps for itself (Slack's `ts` and poll source, Discord's guild);
    no other layer reads it, and keys an older version stored and this one does not know are
    kept there as they were.
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
    kind: str = "message"
    reaction: str | None = None
    target_message_id: str | None = None
    priming: bool = False
    thread_context: tuple[str, ...] | None = None
    cron: CronOccurrence | None = None
    poison: Poison | None = None
    platform_data: dict[str, Any] = field(default_factory=dict)
    trace: str = ""  # W3C traceparent of its intake: its turn continues that trace

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
        """The stored form (the inbound journal, Redis streams, a quarantined message's `raw`):
        the typed parts under `metadata`, in the order their writers always added them."""
        metadata: dict[str, Any] = {}
        if self.poison is not None:
            metadata.update(self.poison.to_dict())
        metadata.update(self.platform_data)
        if self.thread_context is not None:
            metadata["thread_context"] = list(self.thread_context)
        if self.cron is not None:
            metadata.update(self.cron.to_dict())
        if self.trace:
            metadata[_TRACE_KEY] = self.trace
        # a literal, not dataclasses.asdict: that deep-copies and was a hot spot
        return {"provider": self.provider, "chat_id": self.chat_id,
                "message_id": self.message_id, "sender_id": self.sender_id, "text": self.text,
                "sender_name": self.sender_name, "thread_id": self.thread_id,
                "is_mention": self.is_mention, "is_direct": self.is_direct,
                "from_bot": self.from_bot, "attachments": [asdict(a) for a in self.attachments],
                "received_at": self.received_at, "metadata": metadata, "kind": self.kind,
                "reaction": self.reaction, "target_message_id": self.target_message_id,
                "priming": self.priming}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> InboundMessage:
        """A stored message (TypeError: not one)."""
        data = dict(data)
        metadata = data.pop("metadata", None)
        data["attachments"] = [Attachment(**a) for a in data.get("attachments") or []]
        if not metadata:
            return cls(**data)
        if not isinstance(metadata, dict):
            raise TypeError("metadata is not an object")
        poison, cron = Poison.from_dict(metadata), CronOccurrence.from_dict(metadata)
        context = metadata.get("thread_context")
        typed = {*(Poison.KEYS if poison else ()), *(CronOccurrence.KEYS if cron else ()),
                 _TRACE_KEY}
        if isinstance(context, list):
            typed.add("thread_context")
        trace = metadata.get(_TRACE_KEY)
        return cls(**data, poison=poison, cron=cron,
                   thread_context=(tuple(str(line) for line in context)
                                   if isinstance(context, list) else None),
                   platform_data={k: v for k, v in metadata.items() if k not in typed},
                   trace=trace if isinstance(trace, str) else "")


@dataclass(slots=True)
class OutboundMessage:
    """One reply or notice to deliver to a chat; written to the outbox before any send.

    `options`: how the adapter sends it. `announces`: the approval or task step it asks a
    person about, or the task status it shows. `from_chat`: the chat whose run sent it with the
    message tool (kept for the operator). `delivery`: what happened to it before this send.
    """

    provider: str
    chat_id: str
    content: str
    reply_to: str | None = None
    thread_id: str | None = None
    message_id: str = field(default_factory=lambda: new_id("out"))
    inbound_key: str | None = None
    created_at: float = field(default_factory=time.time)
    options: ReplyOptions = _AS_TEXT
    announces: Announcement | None = None
    from_chat: str = ""
    delivery: Delivery = _UNTRIED
    trace: str = ""  # W3C traceparent of the turn that wrote it: its deliveries join that trace

    @property
    def chat_key(self) -> str:
        return f"{self.provider}:{self.chat_id}"

    def to_dict(self) -> dict[str, Any]:
        """The stored form (the outbox): the typed parts under `metadata`."""
        return {"provider": self.provider, "chat_id": self.chat_id, "content": self.content,
                "reply_to": self.reply_to, "thread_id": self.thread_id,
                "message_id": self.message_id, "inbound_key": self.inbound_key,
                "created_at": self.created_at, "metadata": _outbound_metadata(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OutboundMessage:
        """A stored message (TypeError: not one)."""
        data = dict(data)
        parts = _outbound_parts(data.pop("metadata", None))
        return cls(**data, **parts)


def _outbound_metadata(message: OutboundMessage) -> dict[str, Any]:
    """An outbound message's `metadata`, in the order its writers always added the keys: what
    it announces or who sent it, when it was made; how to send it, when it was split; what
    happened to it, later."""
    metadata: dict[str, Any] = {}
    if message.announces is not None:
        metadata.update(message.announces.to_dict())
    if message.from_chat:
        metadata.update(origin=_TOOL_ORIGIN, from_chat=message.from_chat)
    metadata.update(message.options.to_dict())
    metadata.update(message.delivery.to_dict())
    if message.trace:
        metadata[_TRACE_KEY] = message.trace
    return metadata


_NO_PARTS: dict[str, Any] = {"options": _AS_TEXT, "announces": None, "from_chat": "",
                             "delivery": _UNTRIED, "trace": ""}


def _outbound_parts(metadata: Any) -> dict[str, Any]:
    """The typed fields of a stored outbound message's `metadata` (keys it does not know,
    none of which any version wrote, are dropped)."""
    if not metadata:
        return _NO_PARTS
    if not isinstance(metadata, dict):
        raise TypeError("metadata is not an object")
    from_chat = metadata.get("from_chat") if metadata.get("origin") == _TOOL_ORIGIN else None
    trace = metadata.get(_TRACE_KEY)
    return {"options": ReplyOptions.from_dict(metadata), "announces": _announcement(metadata),
            "from_chat": str(from_chat or ""), "delivery": Delivery.from_dict(metadata),
            "trace": trace if isinstance(trace, str) else ""}


@dataclass(slots=True)
class SendResult:
    """What a channel reports after delivering a message."""

    ok: bool = True
    platform_message_ids: list[str] = field(default_factory=list)


class SendError(SoulFlowError):
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


_LETTER_KEYS = frozenset({"at", "provider", "chat_id", "message_id", "reply_to", "thread_id",
                          "retry_count", "error", "content"})


@dataclass(slots=True)
class DeadLetter:
    """A reply that could not be delivered, kept whole for replay: one line of
    `runtime/dlq/outbound.jsonl` (`at, provider, chat_id, message_id, reply_to, thread_id,
    retry_count, error, content, metadata`: the message's own `metadata`, plus the
    `inbound_key` it answered)."""

    at: float
    message: OutboundMessage
    retry_count: int
    error: str

    def to_outbound(self) -> OutboundMessage:
        """The reply to put back in the outbox: new, answering nothing (its inbound message
        is long done), marked as replayed."""
        message = self.message
        return replace(message, inbound_key=None, created_at=time.time(),
                       delivery=replace(message.delivery, replayed_from_dlq_at=self.at))

    def to_dict(self) -> dict[str, Any]:
        message = self.message
        metadata = _outbound_metadata(message)
        if message.inbound_key:
            metadata["inbound_key"] = message.inbound_key
        return {"at": self.at, "provider": message.provider, "chat_id": message.chat_id,
                "message_id": message.message_id, "reply_to": message.reply_to,
                "thread_id": message.thread_id, "retry_count": self.retry_count,
                "error": self.error, "content": message.content, "metadata": metadata}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> DeadLetter:
        """A stored letter (TypeError: not one)."""
        if not isinstance(record, dict) or \
                not _LETTER_KEYS <= record.keys() <= _LETTER_KEYS | {"metadata"}:
            raise TypeError("not a dead letter")
        metadata = dict(record.get("metadata") or {})
        inbound_key = metadata.pop("inbound_key", None)
        message = OutboundMessage(
            provider=record["provider"], chat_id=record["chat_id"], content=record["content"],
            reply_to=record["reply_to"], thread_id=record["thread_id"],
            message_id=record["message_id"], inbound_key=inbound_key,
            **_outbound_parts(metadata))
        return cls(record["at"], message, record["retry_count"], record["error"])


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
"""Takes a model's text as it streams. A callback that also has a `rewind()` method can take
the text of a call again from its start: a provider may then retry (or fail over) after text
was streamed, calling `rewind()` first, instead of giving up to avoid repeating it."""


def can_rewind(on_stream: StreamCallback | None) -> bool:
    """Whether a retry after streamed text may `rewind(on_stream)` and stream it again."""
    return callable(getattr(on_stream, "rewind", None))


def rewind(on_stream: StreamCallback | None) -> None:
    """Tell a rewindable callback the call's text starts over (see `StreamCallback`)."""
    getattr(on_stream, "rewind")()  # noqa: B009 - a duck-typed, optional method


@dataclass(slots=True)
class ToolCall:
    """A tool call requested by the model (`arguments` already parsed from JSON when possible)."""

    id: str
    name: str
    arguments: dict[str, Any] | str


@dataclass(slots=True)
class Usage:
    """Tokens of one model call as the provider reported them; `cost_usd` only when the
    provider itself reports a price (OpenRouter's `usage.cost`), else None (MODEL_PRICES)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = None


@dataclass(slots=True)
class ProviderResult:
    """A model turn: text content and/or tool calls."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    provider: str = ""
    model: str = ""


class ProviderError(SoulFlowError):
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
