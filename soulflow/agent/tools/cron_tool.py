"""The ``cron`` tool: let the agent schedule messages to itself in the current chat.

A job's ``text`` comes back to the agent at the scheduled time as if the user had sent it in
this chat, through the normal inbound pipeline (see docs/cron.md). Adding a job needs no
approval: the job can only ever talk to the agent in the chat it was made in, and whatever
the agent then does goes through the usual approvals. The tool only sees and changes jobs of
the current chat, so one chat can never list or cancel another chat's reminders. Only a run
requested by an admin may name another chat for a new job (`chat`); the operator's
`soulflow cron add --chat` always may.

The tool reaches the scheduler through ``ctx.services.schedule``, an async callable the
runtime provides that returns an object with the small `CronScheduler` interface (the
`CronService`), so tests can hand it any fake with the same methods.
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol

from soulflow.agent.tools.base import Params, Tool, ToolContext, ToolError
from soulflow.contracts import ChatRef
from soulflow.cron.jobs import Job, PayloadKind
from soulflow.cron.schedule import MIN_EVERY_S, Schedule
from soulflow.cron.service import MAX_JOBS_PER_CHAT, MAX_NAME_CHARS, MAX_TEXT_CHARS

__all__ = ["CronScheduler", "CronTool"]


class CronScheduler(Protocol):
    """What the tool needs from the scheduler (implemented by `CronService`)."""

    async def add_job(self, *, name: str, schedule: Schedule, chat: ChatRef, text: str,
                      kind: PayloadKind = PayloadKind.AGENT_TURN) -> Job: ...

    async def list_jobs(self, chat: ChatRef | None = None) -> list[Job]: ...

    async def remove_job(self, job_id: str) -> bool: ...

    async def set_enabled(self, job_id: str, enabled: bool) -> Job: ...


_SCHEDULE = {
    "type": "object",
    "description": (
        "When to fire. {\"kind\": \"at\", \"at\": \"2030-01-31T09:00:00\"} once (ISO time, "
        "read in tz unless it has an offset); {\"kind\": \"every\", \"every_s\": 3600} every N "
        f"seconds (N >= {MIN_EVERY_S}); {{\"kind\": \"cron\", \"expr\": \"0 9 * * 1-5\"}} "
        "a 5-field crontab (minute hour day month weekday; 0 and 7 are Sunday). tz is an "
        "IANA zone such as 'Europe/Berlin' (default UTC)."
    ),
    "properties": {
        "kind": {"type": "string", "enum": ["at", "every", "cron"]},
        "at": {"type": "string"},
        "every_s": {"type": "integer", "minimum": MIN_EVERY_S},
        "expr": {"type": "string"},
        "tz": {"type": "string"},
    },
    "required": ["kind"],
    "additionalProperties": False,
}


class CronTool(Tool):
    name = "cron"
    description = (
        "Schedule a message to yourself in this chat. action=add needs schedule and text: at "
        "the scheduled time `text` arrives here as a new message and you act on it, so write "
        "it as an instruction to your future self (e.g. 'Remind the user to submit the "
        "report.'). action=list shows this chat's jobs; remove, enable and disable take "
        f"job_id. At most {MAX_JOBS_PER_CHAT} jobs per chat."
    )
    parameters = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["add", "list", "remove", "enable", "disable"]},
            "name": {"type": "string", "maxLength": MAX_NAME_CHARS,
                     "description": "Short label shown by list (add only)."},
            "schedule": _SCHEDULE,
            "text": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT_CHARS,
                     "description": "What you will receive when the job fires (add only)."},
            "job_id": {"type": "string", "minLength": 1},
            "kind": {"type": "string", "enum": ["agent_turn", "system_event"],
                     "description": "add only. agent_turn (default): your answer is posted in "
                                    "the chat. system_event: a quiet check; your answer is "
                                    "posted only when it is not HEARTBEAT_OK."},
            "chat": {"type": "string",
                     "description": "add only, admins only: provider:chat_id of another chat "
                                    "to run the job in (default: this chat)."},
        },
        "required": ["action"],
        "additionalProperties": False,
    }
    timeout_s = 15

    async def run(self, params: Params, ctx: ToolContext) -> str:
        scheduler = await _scheduler(ctx)
        chat = ctx.chat.where()
        action = params["action"]
        if action == "add":
            return await _add(scheduler, chat, params)
        if action == "list":
            return _list(await scheduler.list_jobs(chat))
        job = await _own_job(scheduler, chat, params)
        if action == "remove":
            await scheduler.remove_job(job.id)
            return f"removed cron job {job.id} ({job.name})"
        try:
            job = await scheduler.set_enabled(job.id, action == "enable")
        except (KeyError, ValueError) as exc:
            raise ToolError(_message(exc)) from None
        if not job.enabled:
            return f"disabled cron job {job.id} ({job.name})"
        return f"enabled cron job {job.id} ({job.name}); next run {job.state.next_run_at}"


async def _scheduler(ctx: ToolContext) -> CronScheduler:
    scheduler: Any = ctx.services.require("schedule")()
    if inspect.isawaitable(scheduler):
        scheduler = await scheduler
    return scheduler  # type: ignore[no-any-return]


async def _add(scheduler: CronScheduler, chat: ChatRef, params: Params) -> str:
    if "schedule" not in params or "text" not in params:
        raise ToolError("action=add needs both schedule and text")
    text = params["text"].strip()
    if text.startswith("/"):
        # chat commands (/secret, /stop...) are for people; a job's text goes to the agent
        raise ToolError("a job's text must not start with '/': it is sent to you, the agent, "
                        "not run as a chat command")
    try:
        if params.get("chat"):
            other_chat = getattr(scheduler, "other_chat", None)
            if other_chat is None:
                raise ToolError("scheduling a job for another chat is not available here")
            chat = other_chat(params["chat"])
        schedule = Schedule.from_dict(params["schedule"])
        job = await scheduler.add_job(name=params.get("name", ""), schedule=schedule,
                                      chat=chat, text=text,
                                      kind=PayloadKind.parse(params.get("kind")))
    except ValueError as exc:
        raise ToolError(str(exc)) from None
    where = f" in {chat.key}" if params.get("chat") else ""
    return (f"scheduled cron job {job.id} ({job.name}){where}: {job.schedule.describe()}; "
            f"next run {job.state.next_run_at}")


def _list(jobs: list[Job]) -> str:
    if not jobs:
        return "no cron jobs in this chat"
    lines = [f"{len(jobs)} cron job(s) in this chat:"]
    for job in jobs:
        when = f"next run {job.state.next_run_at}" if job.enabled else "disabled"
        last = (f"; last run {job.state.last_run_at} ({job.state.last_result})"
                if job.state.last_run_at else "")
        lines.append(f"- {job.id} | {job.name} | {job.schedule.describe()} | {when}{last}")
    return "\n".join(lines)


async def _own_job(scheduler: CronScheduler, chat: ChatRef, params: Params) -> Job:
    """The job named by job_id, if it belongs to this chat (others are invisible here)."""
    job_id = params.get("job_id")
    if not job_id:
        raise ToolError(f"action={params['action']} needs job_id (see action=list)")
    for job in await scheduler.list_jobs(chat):
        if job.id == job_id:
            return job
    raise ToolError(f"there is no cron job {job_id!r} in this chat; action=list shows them")


def _message(exc: Exception) -> str:
    """KeyError wraps its message in quotes; show the sentence itself."""
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
