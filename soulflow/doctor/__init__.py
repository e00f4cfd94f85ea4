"""`soulflow doctor`: find what keeps SoulFlow from running, and say how to fix it.

Checks (see `runner.CHECKS`): the workspace and the key/.env permissions, the settings, each
configured channel's token (one real SDK call), each provider (one tiny request), the
embedded model, the code sandbox, the dashboard port and the clock. Each prints one line,
ok / warn / FAIL / skip, with the fix; the exit code is 1 when anything FAILs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from soulflow.doctor.model import CheckResult, DoctorContext, Status
from soulflow.doctor.runner import CHECKS, DoctorReport, run_checks

__all__ = ["CHECKS", "CheckResult", "DoctorContext", "DoctorReport", "Status", "diagnose"]


async def diagnose(workspace: Path, environ: Mapping[str, str] | None = None, *,
                   timeout_s: float = 10.0, deep: bool = False) -> DoctorReport:
    """Run every check against `workspace` with settings from `environ` (default: os.environ)
    and the workspace's `.env`."""
    ctx = DoctorContext.load(workspace, environ, timeout_s=timeout_s, deep=deep)
    return await run_checks(ctx)
