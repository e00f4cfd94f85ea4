"""The `soulflow doctor` subcommand: its options and how the report is printed.

Outside the `soulflow.doctor` package so that building the CLI's parser (every command does)
does not import the checks and the SDKs they use.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path


def add_doctor_parser(sub: argparse._SubParsersAction,  # type: ignore[type-arg]
                      common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    doctor = sub.add_parser(
        "doctor", parents=[common], help="check the setup and say how to fix what is wrong",
        description="Check the workspace and file permissions, the settings, each configured "
                    "channel's token and provider, the embedded model, the code sandbox, the "
                    "dashboard port and the clock. One line per check (ok / warn / FAIL / "
                    "skip) with the fix; exit code 1 when a check FAILs. Works whether or not "
                    "the daemon runs.")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument("--deep", action="store_true",
                        help="also start the embedded model once (slow)")
    doctor.add_argument("--timeout", type=float, default=10.0, metavar="S",
                        help="seconds each network check may take (default: 10)")
    return doctor


def run_doctor_command(workspace: Path, args: argparse.Namespace) -> int:
    from soulflow.doctor.runner import diagnose

    report = asyncio.run(diagnose(workspace, os.environ, timeout_s=max(0.5, args.timeout),
                                  deep=args.deep))
    print(report.as_json() if args.json else report.as_text())
    return report.exit_code
