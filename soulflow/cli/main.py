"""The `soulflow` command: init, run, chat, status, doctor, dlq, cron, secret, usage.

User mistakes (bad config, missing workspace, port in use, daemon not running) end with one
sentence on stderr and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path

from soulflow import __version__
from soulflow.cli.errors import UserError
from soulflow.config import ConfigError, Settings, load_settings

EXIT_USAGE = 2
EXIT_FAILURE = 1


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
    from soulflow.cli.status import run_status_command

    return run_status_command(_settings(args), args)


def cmd_doctor(args: argparse.Namespace) -> int:
    from soulflow.cli.doctor import run_doctor_command

    return run_doctor_command(_workspace_from(args), args)


def cmd_secret(args: argparse.Namespace) -> int:
    from soulflow.cli.secret import run_secret_command

    return run_secret_command(_settings(args), args)


def cmd_dlq(args: argparse.Namespace) -> int:
    from soulflow.cli.dlq import run_dlq_command

    return run_dlq_command(_settings(args), args)


def cmd_usage(args: argparse.Namespace) -> int:
    from soulflow.cli.usage import run_usage_command

    return run_usage_command(_settings(args), args)


def cmd_cron(args: argparse.Namespace) -> int:
    from soulflow.cli.cron import run_cron_command

    return run_cron_command(_settings(args), args)


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

    from soulflow.cli.usage import add_usage_parser

    add_usage_parser(sub, common).set_defaults(func=cmd_usage)

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
    from soulflow.dashboard.errors import DashboardError
    from soulflow.security.errors import SecurityError
    from soulflow.storage.lock import WorkspaceLocked

    if args.log_format or os.environ.get("LOG_FORMAT"):  # `run` reconfigures with its level
        setup_logging("warning", args.log_format)
    try:
        return func(args)
    except (UserError, ConfigError, WorkspaceLocked, DashboardError, SecurityError) as exc:
        print(f"soulflow: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
