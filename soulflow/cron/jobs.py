"""A cron job: what it says, where, when (its schedule) and how its runs went.

A job's record is what the cron store keeps (``runtime/cron/cron-store.json``, or the Redis
hash every node's scheduler reads)::

    {"id", "name",
     "schedule": {"kind", "at" | "every_s" | "expr", "tz"},
     "payload": {"kind": "agent_turn" | "system_event",
                 "chat": {"provider", "chat_id", "thread_id"}, "text"},
     "enabled", "created_at",
     "state": {"next_run_at", "last_run_at", "last_status" (ok|error), "last_error", "runs"}}

`Job.from_dict` validates a record (ValueError with the reason). A payload without ``kind``
(written before kinds existed) is an ``agent_turn``. The stores are the backends'
(`backends/base.py` `CronStore`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from typing import Any

from soulflow.contracts import ChatRef, CronRunStatus
from soulflow.cron.schedule import Schedule, from_iso
from soulflow.errors import SoulFlowError

__all__ = ["STATE_FIELDS", "CronError", "Job", "JobState", "PayloadKind", "new_job_id"]


class CronError(SoulFlowError):
    """The base of the scheduler's own errors (an operator's request it cannot do:
    `admin.CronRequestError`). A schedule or a job that does not parse is a `ValueError`, as
    the parsers of the standard library raise."""


def new_job_id() -> str:
    """Short, unique and safe inside an inbound message id (``cron-<id>-<ts>``)."""
    return f"job_{uuid.uuid4().hex[:10]}"


class PayloadKind(StrEnum):
    """What a firing job does.

    * ``agent_turn`` - its text arrives in its chat like a user's message and the agent's
      answer is posted there (a reminder, a daily summary).
    * ``system_event`` - the agent runs its text in the job's own quiet session and posts
      only when the answer is not ``HEARTBEAT_OK`` (heartbeat-style checks).
    """

    AGENT_TURN = "agent_turn"
    SYSTEM_EVENT = "system_event"

    @classmethod
    def parse(cls, value: object) -> PayloadKind:
        if value is None:
            return cls.AGENT_TURN
        try:
            return cls(str(value))
        except ValueError:
            raise ValueError(f"payload kind must be agent_turn or system_event, got {value!r}"
                             ) from None


@dataclass(frozen=True, slots=True)
class JobState:
    """What the scheduler tracks; times are ISO 8601 UTC strings."""

    next_run_at: str | None = None
    last_run_at: str | None = None
    last_status: CronRunStatus | None = None
    last_error: str | None = None  # what went wrong, when last_status is ERROR
    runs: int = 0

    @property
    def last_result(self) -> str:
        """`ok`, or `error: <what>`, as listings show it."""
        if self.last_status is CronRunStatus.ERROR and self.last_error:
            return f"error: {self.last_error}"
        return str(self.last_status or "")


def _last_result(state: dict[str, Any]) -> tuple[CronRunStatus | None, str | None]:
    """The stored status; files written before the enum hold `"error: <what>"` in one string."""
    status = _optional_text(state.get("last_status"), "last_status")
    error = _optional_text(state.get("last_error"), "last_error")
    if status is None:
        return None, None
    word, _, rest = status.partition(":")
    try:
        parsed = CronRunStatus(word.strip())
    except ValueError:
        raise ValueError(f"last_status must be ok or error, got {status!r}") from None
    return parsed, error or (rest.strip() or None if parsed is CronRunStatus.ERROR else None)


STATE_FIELDS = frozenset(f.name for f in fields(JobState))


@dataclass(frozen=True, slots=True)
class Job:
    """One scheduled message to the agent. Immutable: the store hands out fresh copies."""

    id: str
    name: str
    schedule: Schedule
    chat: ChatRef  # where its message appears: the place only (provider, chat, thread)
    text: str
    enabled: bool = True
    created_at: str = ""
    state: JobState = field(default_factory=JobState)
    kind: PayloadKind = PayloadKind.AGENT_TURN

    @property
    def next_run(self) -> datetime | None:
        return from_iso(self.state.next_run_at)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "schedule": self.schedule.to_dict(),
            "payload": {"kind": self.kind.value, "chat": self.chat.place_dict(),
                        "text": self.text},
            "enabled": self.enabled,
            "created_at": self.created_at,
            "state": {f: getattr(self.state, f) for f in sorted(STATE_FIELDS)},
        }

    @classmethod
    def from_dict(cls, data: Any) -> Job:
        """Rebuild a stored job; ValueError (with the reason) if anything is off."""
        if not isinstance(data, dict):
            raise ValueError("a job must be an object")
        try:
            payload, chat = data["payload"], data["payload"]["chat"]
            state = data.get("state") or {}
            last_status, last_error = _last_result(state)
            job = cls(
                id=_text(data["id"], "id"),
                name=_text(data.get("name", ""), "name", allow_empty=True),
                schedule=Schedule.from_dict(data["schedule"]),
                chat=ChatRef(_text(chat["provider"], "provider"), _text(chat["chat_id"],
                             "chat_id"), _optional_text(chat.get("thread_id"), "thread_id")),
                text=_text(payload["text"], "text"),
                enabled=bool(data.get("enabled", True)),
                created_at=_text(data.get("created_at", ""), "created_at", allow_empty=True),
                state=JobState(
                    next_run_at=_time(state.get("next_run_at"), "next_run_at"),
                    last_run_at=_time(state.get("last_run_at"), "last_run_at"),
                    last_status=last_status, last_error=last_error,
                    runs=int(state.get("runs") or 0)),
                kind=PayloadKind.parse(payload.get("kind")),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"missing or malformed field {exc}") from None
        return job


def _text(value: Any, name: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not allow_empty):
        raise ValueError(f"{name} must be a non-empty string")
    return value


def _optional_text(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string or null")
    return value


def _time(value: Any, name: str) -> str | None:
    if value is None:
        return None
    try:
        from_iso(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} is not an ISO 8601 time: {value!r}") from None
    return value
