"""The `soulflow` command: init, run, chat, status, doctor, dlq, cron, secret.

User mistakes (bad config, missing workspace, port in use, daemon not running) end with one
sentence on stderr and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from soulflow import __version__
from soulflow.config import ConfigError, Settings, load_settings

EXIT_USAGE = 2
EXIT_FAILURE = 1


class UserError(Exception):
    """A problem the user can fix; printed as one sentence."""


def _workspace_from(args: argparse.Namespace) -> Path:
    raw = args.workspace or os.environ.get("SOULFLOW_WORKSPACE") or "."
    return Path(raw).expanduser().resolve()


def _settings(args: argparse.Namespace, *, must_exist: bool = True) -> Settings:
    workspace = _workspace_from(args)
    if must_exist and not workspace.is_dir():
        raise UserError(f"the workspace {workspace} does not exist; create it with "
                        f"`soulflow init {workspace}`")
    return load_settings(workspace)


def setup_logging(level: str, fmt: str | None = None) -> None:
    """Log to stderr through a redacting filter (secret-looking env values, token shapes), as
    text lines or JSON lines (`fmt`; else the format already chosen by --log-format, else
    $LOG_FORMAT): see soulflow/logs.py."""
    from soulflow.logs import configure_logging, resolve_format

    configure_logging(level, resolve_format(fmt) if fmt else None)


# -- commands -----------------------------------------------------------------------------

def cmd_init(args: argparse.Namespace) -> int:
    from soulflow.scaffold import ensure_workspace

    workspace = Path(args.dir or args.workspace or os.environ.get("SOULFLOW_WORKSPACE") or ".")
    workspace = workspace.expanduser().resolve()
    workspace.mkdir(parents=True, exist_ok=True)
    created = ensure_workspace(workspace, with_env_example=True)
    print(f"Workspace ready: {workspace}")
    for path in created:
        print(f"  created {path.relative_to(workspace)}")
    print("Next: copy .env.example to .env, set a provider, then run `soulflow run`.")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from soulflow.cli.wiring import create_app
    from soulflow.runtime.open_files import raise_open_files_limit

    settings = _settings(args)
    setup_logging(settings["LOG_LEVEL"], getattr(args, "log_format", None)
                  or settings["LOG_FORMAT"])
    raise_open_files_limit()  # before anything opens a socket; the dashboard fits its caps
    runtime = create_app(settings)
    asyncio.run(runtime.run_until_signal())
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from soulflow.cli.chat import run_chat

    settings = _settings(args)
    return asyncio.run(run_chat(settings, chat_id=args.chat_id, timeout=args.timeout))


def cmd_status(args: argparse.Namespace) -> int:
    from soulflow.cli.client import DaemonClient

    settings = _settings(args)
    state = DaemonClient.connect(settings).get("/api/state")
    if args.json:
        print(json.dumps(state, indent=2, ensure_ascii=False))
        return 0
    queues, counters = state["queues"], state["counters"]
    print(f"SoulFlow {state['version']} running (pid {state['pid']}, up {state['uptime_s']}s)")
    print(f"  workspace  {state['workspace']}")
    print(f"  provider   {state['provider'] or 'none configured'}")
    _print_backend(state.get("backend") or {})
    if state.get("sandbox"):
        sandbox = state["sandbox"]
        print(f"  sandbox    {sandbox['mode']} ({sandbox['detail']})")
        if sandbox.get("process_cap"):
            print(f"             {sandbox['process_cap']}")
    _print_disk(state.get("disk") or {})
    if state.get("local_model"):
        local = state["local_model"]
        print(f"  local model {local['model']} {local['state']} (pid {local['pid']}, "
              f"{local['rss_mb']} MB, restarts={local['restarts']})")
    _print_channels(state)
    _print_background(state)
    print("  queues     " + ", ".join(f"{k}={v}" for k, v in queues.items()))
    print("  counters   " + ", ".join(f"{k}={v}" for k, v in counters.items()))
    print(f"  sessions   {len(state['sessions'])}")
    return 0


def _print_backend(backend: dict[str, Any]) -> None:
    """Where the bus's state lives; with Redis: this node, its partitions, and whether Redis
    answers (a node that lost it takes no new work)."""
    if backend.get("kind") != "redis":
        return
    partitions = backend.get("partitions") or {}
    line = (f"  backend    redis {backend.get('url', '')}, node {backend.get('node_id')}, "
            f"partitions {len(partitions.get('held', []))}/{partitions.get('total', '?')}")
    if not backend.get("connected", True):
        since = backend.get("since")
        when = time.strftime("%H:%M:%S", time.localtime(since)) if since else "?"
        line += f"; UNREACHABLE since {when}: {str(backend.get('last_error', ''))[:100]}"
    print(line)


def _print_disk(disk: dict[str, Any], largest: int = 5) -> None:
    """What the chat folders hold (as last measured, after each write or exec call), their
    quotas, and the largest folders."""
    if not disk:
        return
    quota = disk.get("quota") or {}
    print(f"  disk       {disk.get('chats', 0)} chat folder(s) hold "
          f"{_size(disk.get('bytes', 0))} in {disk.get('files', 0)} files and folders; "
          f"quota per chat {_size(quota.get('chat_bytes', 0))} / "
          f"{quota.get('chat_files', '?')}, per exec call "
          f"{_size(quota.get('exec_bytes', 0))} / {quota.get('exec_files', '?')}")
    for row in (disk.get("largest") or [])[:largest]:
        print(f"    {row['zone']:<30} {_size(row['bytes']):>10} {row['files']:>7} files")


def _size(size: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def _print_channels(state: dict[str, Any]) -> None:
    """Each channel's health, and the inbound messages set aside as poison (latest three)."""
    print("  channels")
    for channel in state["channels"]:
        line = f"    {channel['name']:<10} {channel.get('status', '?')}"
        if channel.get("role") == "leader":  # a shared account (redis): this node reads it
            line += f", reading as leader (lease token {channel.get('lease_token')})"
        elif channel.get("role") == "standby":
            line += ", another node reads the account (this one sends)"
        if channel.get("consecutive_failures"):
            line += f", {channel['consecutive_failures']} failed read(s) in a row"
        if channel.get("send_failures"):
            line += f", {channel['send_failures']} failed send(s) in a row"
        if channel.get("restarts"):
            line += f", restarted {channel['restarts']}x"
        if channel.get("last_error"):
            line += f"; last error: {channel['last_error'][:120]}"
        print(line)
    count = state["queues"].get("inbound_dlq", 0)
    if count:
        print(f"  quarantined {count} inbound message(s); see `soulflow dlq list --inbound`")
        for entry in (state.get("inbound_dlq") or [])[-3:]:
            print(f"    {entry['provider']}:{entry['chat_id']} at {entry['stage']}: "
                  f"{entry['error'][:100]}")


def _print_background(state: dict[str, Any]) -> None:
    """The heartbeat's schedule and last result; what ops finds broken and last did."""
    heartbeat = state.get("heartbeat") or {}
    if heartbeat.get("enabled"):
        last = heartbeat.get("last_outcome") or heartbeat.get("last_status") or "not yet"
        print(f"  heartbeat  every {heartbeat['interval_s']:g}s to {heartbeat['target']}, "
              f"last: {last} ({heartbeat.get('model_calls', 0)} model call(s) since start)")
    ops = state.get("ops") or {}
    for problem in ops.get("problems") or []:
        print(f"  problem    {problem['message'][:150]}")
    for action in (ops.get("actions") or [])[-3:]:
        print(f"  watchdog   {action['kind']} {action['target']}: {action['reason'][:120]}")


def cmd_doctor(args: argparse.Namespace) -> int:
    from soulflow.cli.doctor import run_doctor_command

    return run_doctor_command(_workspace_from(args), args)


def cmd_secret(args: argparse.Namespace) -> int:
    from soulflow.cli.secret import run_secret_command

    return run_secret_command(_settings(args), args)


def cmd_dlq(args: argparse.Namespace) -> int:
    from soulflow.cli.dlq import run_dlq_command

    return run_dlq_command(_settings(args), args)


def cmd_cron(args: argparse.Namespace) -> int:
    from soulflow.cli.cron import CronCommandError, run_cron_command

    try:
        return run_cron_command(_settings(args), args)
    except CronCommandError as exc:
        raise UserError(str(exc)) from None


# -- parser -------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    workspace_help = "workspace directory (default: $SOULFLOW_WORKSPACE or the current directory)"
    log_format_help = "log lines as text or JSON (default: LOG_FORMAT, else text)"
    # on subcommands the option must not default to None: that would erase a --workspace
    # given before the command name
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--workspace", metavar="DIR", default=argparse.SUPPRESS,
                        help=workspace_help)
    common.add_argument("--log-format", choices=("text", "json"), default=argparse.SUPPRESS,
                        help=log_format_help)
    parser = argparse.ArgumentParser(
        prog="soulflow", description="SoulFlow: a self-hosted chat-agent daemon.")
    parser.add_argument("--workspace", metavar="DIR", default=None, help=workspace_help)
    parser.add_argument("--log-format", choices=("text", "json"), default=None,
                        help=log_format_help)
    parser.add_argument("--version", action="version", version=f"soulflow {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, func: Callable[[argparse.Namespace], int], help_: str,
                description: str) -> argparse.ArgumentParser:
        """A subcommand that takes the common options and runs `func`."""
        command_parser = sub.add_parser(name, parents=[common], help=help_,
                                        description=description)
        command_parser.set_defaults(func=func)
        return command_parser

    init = command("init", cmd_init, "create a workspace",
                   "Create a workspace: .env.example, templates, memory, runtime/. Existing "
                   "files are kept.")
    init.add_argument("dir", nargs="?", help="directory to initialise (default: workspace)")

    command("run", cmd_run, "run the daemon",
            "Run the daemon in the foreground until SIGINT/SIGTERM.")

    chat = command("chat", cmd_chat, "chat with the agent from the terminal",
                   "Talk to the agent over the local channel. Uses the running daemon, or "
                   "starts one in this process. When stdin is not a terminal, each line is one "
                   "message and each reply is printed.")
    chat.add_argument("--chat-id", default="terminal", help="local chat id (default: terminal)")
    chat.add_argument("--timeout", type=float, default=300.0,
                      help="seconds to wait for each reply (default: 300)")

    status = command("status", cmd_status, "show the running daemon's state",
                     "Show queues, counters and sessions of the running daemon.")
    status.add_argument("--json", action="store_true", help="print the raw JSON state")

    dlq = command("dlq", cmd_dlq, "inspect and replay dead letters",
                  "Replies that could not be delivered.")
    dlq_sub = dlq.add_subparsers(dest="dlq_command", metavar="ACTION", required=True)
    dlq_list = dlq_sub.add_parser("list", parents=[common], help="list dead letters")
    dlq_list.add_argument("--json", action="store_true", help="print JSON lines")
    dlq_list.add_argument("--inbound", action="store_true",
                          help="list quarantined inbound messages (poison input) instead")
    dlq_replay = dlq_sub.add_parser("replay", parents=[common],
                                    help="put dead letters back in the outbox")
    dlq_replay.add_argument("ids", nargs="*", help="message ids (default: all)")
    dlq_sub.add_parser("purge", parents=[common], help="delete every dead letter")

    from soulflow.cli.doctor import add_doctor_parser

    add_doctor_parser(sub, common).set_defaults(func=cmd_doctor)

    from soulflow.cli.cron import add_cron_parser

    add_cron_parser(sub, common).set_defaults(func=cmd_cron)

    secret = command("secret", cmd_secret, "manage the secret vault",
                     "Secrets are stored encrypted in runtime/security/. Values are read from a "
                     "prompt or stdin, never from the command line.")
    secret_sub = secret.add_subparsers(dest="secret_command", metavar="ACTION", required=True)
    secret_set = secret_sub.add_parser("set", parents=[common],
                                       help="store a secret (value from a prompt or stdin)")
    secret_set.add_argument("name", help="secret name: letters, digits, '.', '_' or '-'")
    secret_sub.add_parser("list", parents=[common], help="list secret names (never values)")
    secret_rm = secret_sub.add_parser("rm", parents=[common], help="delete a secret")
    secret_rm.add_argument("name")
    secret_sub.add_parser("rotate-key", parents=[common],
                          help="new master key; every secret is re-encrypted")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return EXIT_USAGE
    from soulflow.cli.client import DaemonNotRunning
    from soulflow.dashboard.service import DashboardError
    from soulflow.security.errors import SecurityError
    from soulflow.storage.lock import WorkspaceLocked

    if args.log_format or os.environ.get("LOG_FORMAT"):  # `run` reconfigures with its level
        setup_logging("warning", args.log_format)
    try:
        return func(args)
    except (UserError, ConfigError, WorkspaceLocked, DashboardError, DaemonNotRunning,
            SecurityError) as exc:
        print(f"soulflow: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
