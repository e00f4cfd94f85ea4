"""`CronStore`: the cron jobs on disk, in one small JSON file rewritten atomically.

``runtime/cron/cron-store.json``::

    {"version": 1, "jobs": {"<id>": {"id", "name",
        "schedule": {"kind", "at" | "every_s" | "expr", "tz"},
        "payload": {"kind": "agent_turn" | "system_event",
                    "chat": {"provider", "chat_id", "thread_id"}, "text"},
        "enabled", "created_at",
        "state": {"next_run_at", "last_run_at", "last_status" (ok|error), "last_error", "runs"}}}}

Every change rewrites the whole file (temp file, fsync, rename), so a crash leaves the old or
the new job list, never half of one. A file that cannot be read - invalid JSON, an unknown
version, a job that does not validate - is moved aside (never deleted) and the jobs that are
still valid are kept: losing one broken job must not silently drop all the others.

A payload without ``kind`` (written before kinds existed) is an ``agent_turn``.

`JobStore` is what the scheduler needs from a store; `CronStore` is the file one. With the Redis
backend several schedulers share one store (`soulflow/backends/redis/cron.py`), so the protocol
adds two things one process never needed: `claim_occurrence` (only one node fires a scheduled
time) and `advance` (move a job's state on only if nobody did meanwhile).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from soulflow.contracts import ChatRef, CronRunStatus
from soulflow.cron.schedule import Schedule, from_iso
from soulflow.storage.atomic import quarantine, read_json, write_json_atomic

__all__ = ["STATE_FIELDS", "STORE_VERSION", "CronStore", "Job", "JobState", "JobStore",
           "PayloadKind", "new_job_id"]

log = logging.getLogger(__name__)

STORE_VERSION = 1


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


class JobStore(Protocol):
    """The jobs as the scheduler, the tool and the operator's commands use them."""

    @property
    def shared(self) -> bool:
        """True when other schedulers (other nodes) read and write the same jobs: the
        scheduler then re-reads them every poll and claims each occurrence before firing."""

    def list(self, chat_key: str | None = None) -> list[Job]: ...

    def get(self, job_id: str) -> Job | None: ...

    def __len__(self) -> int: ...

    def add(self, job: Job) -> Job: ...

    def remove(self, job_id: str) -> Job | None: ...

    def update_state(self, job_id: str, *, enabled: bool | None = None,
                     **changes: Any) -> Job:
        """Change state fields and optionally `enabled` at once; KeyError if unknown."""

    def advance(self, job_id: str, expected_next_run_at: str | None, *,
                enabled: bool | None = None, **changes: Any) -> Job | None:
        """`update_state`, but only while the job's `next_run_at` is still
        `expected_next_run_at` (the occurrence just fired); None if the job is gone or was
        moved on meanwhile (by another node, or by the operator)."""

    def claim_occurrence(self, job_id: str, stamp: str) -> bool:
        """May this scheduler fire the job's occurrence `stamp` now? True for one claimant
        until the claim expires (a node that died mid-fire leaves it to expire)."""


class CronStore:
    """The job list, loaded once and written through on every change.

    Single-writer by design: the daemon holds the workspace lock, and every caller runs on
    its event loop, so the in-memory copy is always the truth and needs no re-reading.
    """

    shared = False  # one daemon per workspace: no other scheduler to coordinate with

    def __init__(self, path: Path) -> None:
        self.path = path
        self._jobs: dict[str, Job] = self._load()

    # -- reading -------------------------------------------------------------------------

    def list(self, chat_key: str | None = None) -> list[Job]:
        """Jobs in creation order, optionally only those of one chat (``provider:chat_id``)."""
        jobs = sorted(self._jobs.values(), key=lambda j: (j.created_at, j.id))
        return [j for j in jobs if chat_key is None or j.chat.key == chat_key]

    def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def __len__(self) -> int:
        return len(self._jobs)

    # -- changes (each one is persisted before it returns) -------------------------------

    def add(self, job: Job) -> Job:
        if job.id in self._jobs:
            raise ValueError(f"a cron job with id {job.id!r} already exists")
        self._jobs[job.id] = job
        self._save()
        return job

    def remove(self, job_id: str) -> Job | None:
        job = self._jobs.pop(job_id, None)
        if job is not None:
            self._save()
        return job

    def enable(self, job_id: str, enabled: bool) -> Job:
        return self._replace(self._require(job_id), enabled=enabled)

    def update_state(self, job_id: str, *, enabled: bool | None = None,
                     **changes: Any) -> Job:
        """Change state fields (``next_run_at=...``, ``runs=...``) and optionally ``enabled``
        in one write, so a fired ``at`` job is never persisted half-updated."""
        unknown = set(changes) - STATE_FIELDS
        if unknown:
            raise TypeError(f"unknown job state field(s): {', '.join(sorted(unknown))}")
        job = self._require(job_id)
        new_state = replace(job.state, **changes)
        if enabled is None:
            return self._replace(job, state=new_state)
        return self._replace(job, state=new_state, enabled=enabled)

    def advance(self, job_id: str, expected_next_run_at: str | None, *,
                enabled: bool | None = None, **changes: Any) -> Job | None:
        job = self._jobs.get(job_id)
        if job is None or job.state.next_run_at != expected_next_run_at:
            return None
        return self.update_state(job_id, enabled=enabled, **changes)

    def claim_occurrence(self, job_id: str, stamp: str) -> bool:
        return True  # the only scheduler of this workspace

    # -- internals -----------------------------------------------------------------------

    def _require(self, job_id: str) -> Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise KeyError(f"no cron job with id {job_id!r}")
        return job

    def _replace(self, job: Job, **changes: Any) -> Job:
        updated = replace(job, **changes)
        self._jobs[job.id] = updated
        self._save()
        return updated

    def _save(self) -> None:
        data = {"version": STORE_VERSION,
                "jobs": {job.id: job.to_dict() for job in self.list()}}
        write_json_atomic(self.path, data)

    def _load(self) -> dict[str, Job]:
        data = read_json(self.path, None)  # invalid JSON is quarantined there
        if data is None:
            return {}
        if not isinstance(data, dict) or data.get("version") != STORE_VERSION or \
                not isinstance(data.get("jobs"), dict):
            quarantine(self.path, f"not a version-{STORE_VERSION} cron store")
            return {}
        jobs: dict[str, Job] = {}
        broken: list[str] = []
        for key, raw in data["jobs"].items():
            try:
                job = Job.from_dict(raw)
            except ValueError as exc:
                broken.append(f"{key}: {exc}")
                continue
            jobs[job.id] = job
        if broken:
            moved = quarantine(self.path, "invalid cron job(s): " + "; ".join(broken))
            log.error("kept %d valid cron job(s); the original file is at %s", len(jobs), moved)
            self._jobs = jobs
            self._save()
        return jobs


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
