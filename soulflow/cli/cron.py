"""`soulflow cron list|add|rm|run|enable|disable`: the operator's view of scheduled jobs.

Only the process holding the workspace lock writes the cron store, so with a daemon running
these commands go through its API (`/api/cron…`, see soulflow/cron/api.py) and the daemon's
scheduler sees a change at once; without one they take the lock and edit the store, and the
daemon picks the jobs up when it starts. With the Redis backend and no daemon on this node
they write the jobs in Redis (atomic per job, no lock needed), where the daemons of the other
nodes see them within a second. `run` fires a job immediately through a running
daemon; offline it makes the job due now, so it fires as soon as the daemon starts.

Unlike the agent's `cron` tool, the operator may target any chat of any configured channel
(`--chat provider:chat_id`).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from soulflow.cli.errors import UserError
from soulflow.config import Settings
from soulflow.config.catalog import parse_duration_s

if TYPE_CHECKING:  # the parser is built on every `soulflow` call: import the rest on use
    from soulflow.backends.base import CronStore
    from soulflow.cli.client import DaemonClient

__all__ = ["CronCommandError", "add_cron_parser", "run_cron_command"]


class CronCommandError(UserError):
    """A request the daemon or the store refused; printed as one sentence."""


def configured_channels(settings: Settings) -> list[str]:
    """The channels a daemon on these settings runs: local, plus each platform with a token."""
    from soulflow.channels.wiring import PLATFORMS

    return ["local", *(p for p in PLATFORMS if settings[f"{p.upper()}_BOT_TOKEN"])]


def _schedule(args: argparse.Namespace) -> dict[str, Any]:
    given = [name for name in ("every", "cron", "at") if getattr(args, name)]
    if len(given) != 1:
        raise CronCommandError("give exactly one of --every, --cron or --at")
    tz = args.tz or "UTC"
    if args.every:
        try:
            seconds = parse_duration_s(args.every)
        except ValueError:
            raise CronCommandError(f"--every {args.every!r} is not a duration such as 90s, "
                                   "15m, 1h or 2d") from None
        return {"kind": "every", "every_s": seconds, "tz": tz}
    if args.cron:
        return {"kind": "cron", "expr": args.cron, "tz": tz}
    return {"kind": "at", "at": args.at, "tz": tz}


def _body(args: argparse.Namespace) -> dict[str, Any]:
    if args.cron_command == "add":
        return {"name": args.name or "", "text": " ".join(args.text), "chat": args.chat,
                "kind": args.kind, "schedule": _schedule(args)}
    return {"id": args.id}


def _offline(settings: Settings, args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    """The command on the store itself; and whether other nodes' schedulers share it."""
    from soulflow.backends.wiring import BackendConfig, command_backend
    from soulflow.storage.lock import WorkspaceLock

    with command_backend(BackendConfig.from_settings(settings), settings.runtime_dir) as backend:
        if backend.shared:  # Redis: the store is shared and atomic, not this workspace's
            return _apply(settings, args, backend.cron), True
        with WorkspaceLock(settings.runtime_dir / "daemon.lock"):  # read once it is ours
            return _apply(settings, args, backend.cron), False


def _apply(settings: Settings, args: argparse.Namespace, store: CronStore) -> dict[str, Any]:
    from soulflow.cron.admin import CronRequestError, apply_action, list_jobs
    from soulflow.cron.service import CronService

    service = CronService(store, _no_fire)
    if args.cron_command == "list":
        return asyncio.run(list_jobs(service, args.chat))
    try:
        return asyncio.run(apply_action(service, args.cron_command, _body(args),
                                        configured_channels(settings), can_fire=False))
    except CronRequestError as exc:
        raise CronCommandError(str(exc)) from None


def _no_fire(*_: object) -> None:
    raise RuntimeError("jobs fire only inside the daemon")


def _online(client: DaemonClient, args: argparse.Namespace) -> dict[str, Any]:
    if args.cron_command == "list":
        query = f"?{urlencode({'chat': args.chat})}" if args.chat else ""
        return client.get(f"/api/cron{query}")
    return client.post(f"/api/cron/{args.cron_command}", _body(args))


def run_cron_command(settings: Settings, args: argparse.Namespace) -> int:
    from soulflow.cli.client import DaemonClient

    client = DaemonClient.locate(settings)
    result, shared = (_online(client, args), False) if client is not None else \
        _offline(settings, args)
    if getattr(args, "json", False):
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    if args.cron_command == "list":
        _print_jobs(result["jobs"])
        return 0
    job = result.get("job") or {}
    verb = {"add": "Added", "rm": "Removed", "enable": "Enabled", "disable": "Disabled"}
    if args.cron_command == "run":
        later = ("a running node fires it within a second, or the first node that starts"
                 if shared else "it fires when the daemon starts")
        print(f"Fired job {job.get('id')} now." if result.get("fired") else
              f"Job {job.get('id')} is due now; {later}.")
    else:
        print(f"{verb[args.cron_command]} job {job.get('id')}.")
    if job and args.cron_command != "rm":
        _print_jobs([job])
    return 0


def _print_jobs(jobs: list[dict[str, Any]]) -> None:
    from soulflow.cron.schedule import Schedule

    if not jobs:
        print("No cron jobs.")
    for job in jobs:
        payload, state, schedule = job["payload"], job["state"], job["schedule"]
        chat = payload["chat"]
        when = state.get("next_run_at") if job["enabled"] else "disabled"
        rule = Schedule.from_dict(schedule).describe()
        last = ""
        if state.get("last_run_at"):
            result = state.get("last_status") or ""
            if state.get("last_error"):
                result = f"{result}: {state['last_error']}"
            last = f"  last {_short(state['last_run_at'])} ({result})"
        print(f"{job['id']}  {payload.get('kind', 'agent_turn'):<12} "
              f"{chat['provider']}:{chat['chat_id']}  {rule}  "
              f"next {_short(when)}{last}  | {job['name']}")


def _short(value: str | None) -> str:
    if not value or value == "disabled":
        return value or "-"
    try:
        return dt.datetime.fromisoformat(value).isoformat(timespec="minutes")
    except ValueError:
        return value


def add_cron_parser(sub: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The `cron` subcommand and its actions (called by cli.build_parser)."""
    cron = sub.add_parser("cron", parents=[common], help="list and manage scheduled jobs",
                          description="Scheduled jobs: through the running daemon, or on the "
                                      "store when it is stopped. See docs/cron.md.")
    actions = cron.add_subparsers(dest="cron_command", metavar="ACTION", required=True)
    listing = actions.add_parser("list", parents=[common], help="list jobs")
    listing.add_argument("--chat", metavar="PROVIDER:CHAT_ID", help="only this chat's jobs")
    listing.add_argument("--json", action="store_true", help="print the raw JSON")
    add = actions.add_parser("add", parents=[common], help="schedule a job",
                             description="Schedule TEXT for the agent in a chat.")
    add.add_argument("text", nargs="+", help="what the agent receives when the job fires")
    add.add_argument("--chat", required=True, metavar="PROVIDER:CHAT_ID",
                     help="the chat it runs in, on any configured channel (e.g. "
                          "telegram:-1001234567890, local:ops)")
    when = add.add_mutually_exclusive_group(required=True)
    when.add_argument("--every", metavar="DURATION", help="every 90s, 15m, 1h, 2d …")
    when.add_argument("--cron", metavar="EXPR", help="5-field crontab, e.g. '0 9 * * 1-5'")
    when.add_argument("--at", metavar="ISO_TIME", help="once, e.g. 2030-01-31T09:00:00")
    add.add_argument("--tz", help="IANA time zone of the schedule (default UTC)")
    add.add_argument("--name", help="short label shown by list")
    add.add_argument("--kind", choices=("agent_turn", "system_event"), default="agent_turn",
                     help="agent_turn: the answer is posted in the chat (default); "
                          "system_event: posted only when it is not HEARTBEAT_OK")
    add.add_argument("--json", action="store_true", help="print the raw JSON")
    for action, text in (("rm", "delete a job"), ("run", "fire a job once now"),
                         ("enable", "enable a job"), ("disable", "disable a job")):
        parser = actions.add_parser(action, parents=[common], help=text)
        parser.add_argument("id", help="job id (see `soulflow cron list`)")
        parser.add_argument("--json", action="store_true", help="print the raw JSON")
    return cron
