"""Operator actions on cron jobs, shared by the daemon's API and the offline CLI.

`soulflow cron …` reaches these through `POST /api/cron/…` while the daemon runs, and
directly on the store (under the workspace lock) while it does not; both paths validate the
same way and answer the same JSON. The operator may target any chat of any configured
channel; the per-chat job limit still applies to it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from soulflow.contracts import ChatRef
from soulflow.cron.jobs import CronError, Job, PayloadKind
from soulflow.cron.schedule import Schedule, to_iso
from soulflow.cron.service import CronService

__all__ = ["ACTIONS", "CronRequestError", "ToolCronHandle", "apply_action", "job_chat",
           "list_jobs"]

ACTIONS = ("add", "rm", "run", "enable", "disable")


class CronRequestError(CronError, ValueError):
    """A request the operator can fix (unknown job, bad schedule, unknown channel). Also a
    `ValueError`: the cron tool catches the chat a job names (`job_chat`) that way."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def job_chat(value: Any, channels: Collection[str]) -> ChatRef:
    """A job's chat from `provider:chat_id` or {provider, chat_id, thread_id}, checked
    against the channels this workspace runs."""
    if isinstance(value, str):
        provider, sep, chat_id = value.strip().partition(":")
        if not sep or not provider or not chat_id:
            raise CronRequestError(f"chat {value!r} must be provider:chat_id, e.g. "
                                   "telegram:-1001234567890 or local:ops")
        chat = ChatRef(provider.lower(), chat_id)
    elif isinstance(value, Mapping):
        provider, chat_id, thread = value.get("provider"), value.get("chat_id"), \
            value.get("thread_id")
        if not isinstance(provider, str) or not isinstance(chat_id, str) or not chat_id or \
                not (thread is None or isinstance(thread, str)):
            raise CronRequestError("chat needs string provider and chat_id (and an optional "
                                   "string thread_id)")
        chat = ChatRef(provider.lower(), chat_id, thread)
    else:
        raise CronRequestError("a job needs chat: provider:chat_id")
    if chat.provider not in channels:
        raise CronRequestError(f"there is no {chat.provider!r} channel in this workspace "
                               f"(configured: {', '.join(sorted(channels))})")
    return chat


async def list_jobs(service: CronService, chat: str | None = None) -> dict[str, Any]:
    return {"ok": True, "jobs": [job.to_dict() for job in await service.jobs(chat or None)]}


async def apply_action(service: CronService, action: str, body: Mapping[str, Any],
                       channels: Collection[str], *, can_fire: bool = True) -> dict[str, Any]:
    """Run one action; `{"ok": True, "job": ...}` or CronRequestError. Without a daemon
    (`can_fire` False) `run` makes the job due now, so the daemon fires it when it starts."""
    if action == "add":
        return {"ok": True, "job": (await _add(service, body, channels)).to_dict()}
    job_id = body.get("id")
    if not isinstance(job_id, str) or not job_id:
        raise CronRequestError(f"{action} needs id, a job id (see `soulflow cron list`)")
    job = await service.get_job(job_id)
    if job is None:
        raise CronRequestError(f"there is no cron job {job_id!r}", status=404)
    if action == "rm":
        await service.remove_job(job_id)
        return {"ok": True, "job": job.to_dict(), "removed": True}
    if action == "run":
        if can_fire:
            return {"ok": True, "job": (await service.run_now(job_id)).to_dict(), "fired": True}
        return {"ok": True, "job": (await _due_now(service, job)).to_dict(), "fired": False}
    if action in ("enable", "disable"):
        try:
            job = await service.set_enabled(job_id, action == "enable")
        except ValueError as exc:
            raise CronRequestError(str(exc)) from None
        return {"ok": True, "job": job.to_dict()}
    raise CronRequestError(f"unknown action {action!r}; use one of {', '.join(ACTIONS)}",
                           status=404)


async def _add(service: CronService, body: Mapping[str, Any],
               channels: Collection[str]) -> Job:
    text, name = body.get("text"), body.get("name", "")
    if not isinstance(text, str) or not text.strip():
        raise CronRequestError("add needs text: what the agent receives when the job fires")
    if not isinstance(name, str):
        raise CronRequestError("name must be a string")
    try:
        schedule = Schedule.from_dict(body.get("schedule"))  # type: ignore[arg-type]
        kind = PayloadKind.parse(body.get("kind"))
        return await service.add_job(name=name, schedule=schedule, text=text, kind=kind,
                                     chat=job_chat(body.get("chat"), channels))
    except CronRequestError:
        raise
    except ValueError as exc:
        raise CronRequestError(str(exc)) from None


async def _due_now(service: CronService, job: Job) -> Job:
    if not job.enabled:
        raise CronRequestError(f"job {job.id} is disabled; enable it first, or run it while "
                               "the daemon runs (that fires it once without enabling it)")
    now = service.now().replace(microsecond=0)
    return await service.update_job(job.id, next_run_at=to_iso(now))


@dataclass(frozen=True, slots=True)
class ToolCronHandle:
    """The scheduler as the agent's `cron` tool sees it during one run.

    A job normally runs in the chat that created it. Only when the run's requester is an
    admin (`admin`) may the tool name another chat (`other_chat`), on any configured channel:
    otherwise a prompt-injected model could post into chats its user cannot see.
    """

    service: CronService
    admin: bool
    channels: Collection[str]

    async def add_job(self, *, name: str, schedule: Schedule, chat: ChatRef, text: str,
                      kind: PayloadKind = PayloadKind.AGENT_TURN) -> Job:
        return await self.service.add_job(name=name, schedule=schedule, chat=chat, text=text,
                                          kind=kind)

    async def list_jobs(self, chat: ChatRef | None = None) -> list[Job]:
        return await self.service.list_jobs(chat)

    async def remove_job(self, job_id: str) -> bool:
        return await self.service.remove_job(job_id)

    async def set_enabled(self, job_id: str, enabled: bool) -> Job:
        return await self.service.set_enabled(job_id, enabled)

    def other_chat(self, value: str) -> ChatRef:
        """The chat `provider:chat_id` names, if this requester may target it."""
        if not self.admin:
            raise ValueError("only an admin may schedule a job for another chat; leave chat "
                             "out to schedule it here")
        return job_chat(value, self.channels)
