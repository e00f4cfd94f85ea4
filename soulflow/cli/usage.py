"""`soulflow usage [--since 7d] [--by chat|user|source|model|day] [--json]`: model tokens and
cost from the usage store.

Read straight from the backend (the file `runtime/usage/usage.json`, replaced atomically by
the daemon, or the shared Redis hashes), so it answers the same with or without a running
daemon and never takes the workspace lock.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from soulflow.backends.wiring import BackendConfig, open_backend
from soulflow.cli.errors import UserError
from soulflow.config import Settings
from soulflow.runtime.wiring import usage_meter

BY = ("chat", "user", "source", "model", "provider", "day")


def parse_since(raw: str) -> int:
    """`7d` (days, today included), `1d` = today only; a bare number is days too."""
    text = raw.strip().lower().removesuffix("d")
    if not text.isdigit() or not 1 <= int(text) <= 3660:
        raise UserError(f"--since {raw!r}: expected days such as 1d, 7d or 30d")
    return int(text)


async def _read(settings: Settings, days: int, by: str) -> dict[str, Any]:
    from soulflow.agent.usage import usage_report

    backend = await open_backend(BackendConfig.from_settings(settings), settings.runtime_dir,
                                 join=False)
    try:
        return usage_report(usage_meter(settings, backend), days=days, by=(by,))
    finally:
        await backend.stop()


def run_usage_command(settings: Settings, args: argparse.Namespace) -> int:
    days = parse_since(args.since)
    report = asyncio.run(_read(settings, days, args.by))
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=1))
        return 0
    total = report["total"]
    print(f"Model usage {report['since']} .. {report['today']}: {total['calls']} calls, "
          f"{total['prompt_tokens']} prompt + {total['completion_tokens']} completion tokens, "
          f"${total['cost_usd']:.4f}")
    rows = report["by"][args.by]
    if not rows:
        return 0
    names = report.get("names", {}) if args.by == "user" else {}

    def label(key: str) -> str:
        return f"{names[key]} ({key})" if key in names else key or "-"

    width = max(len(args.by), *(len(label(r["key"])) for r in rows))
    print(f"{args.by:<{width}}  {'calls':>7}  {'prompt':>10}  {'completion':>10}  {'USD':>10}")
    for row in rows:
        print(f"{label(row['key']):<{width}}  {row['calls']:>7}  {row['prompt_tokens']:>10}  "
              f"{row['completion_tokens']:>10}  {row['cost_usd']:>10.4f}")
    return 0


def add_usage_parser(sub: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "usage", parents=[common], help="model tokens and cost",
        description="Model tokens and cost per day, summed by chat, user, source or model "
                    "(days in WORKSPACE_TIMEZONE).")
    parser.add_argument("--since", default="1d", help="days back, today included (default 1d)")
    parser.add_argument("--by", choices=BY, default="source",
                        help="split the totals by this (default: source)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser
