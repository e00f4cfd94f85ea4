"""Run every check concurrently, each under a timeout, and print the report.

A check that raises or runs out of time becomes a FAIL line naming what happened, so one
broken check (or one silent network) never hides the others or hangs the command. Every
line passes through the daemon's `Redactor` before it is printed: an SDK error can quote a
URL holding a token (Telegram's `/bot<token>/getMe`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from soulflow.config.catalog import SETTINGS
from soulflow.doctor import files, platforms, remote, system
from soulflow.doctor.mcp import check_mcp
from soulflow.doctor.model import Check, CheckResult, DoctorContext, Status, fail
from soulflow.security.redact import Redactor, secret_env_values

CHECKS: tuple[Check, ...] = (
    Check("workspace", files.check_workspace),
    Check("permissions", files.check_permissions),
    Check("settings", files.check_settings),
    Check("channels", platforms.check_channels),
    Check("channel slack", platforms.check_slack, network=True),
    Check("channel telegram", platforms.check_telegram, network=True),
    Check("channel discord", platforms.check_discord, network=True),
    Check("providers", remote.check_providers, network=True),
    Check("cli providers", system.check_cli_providers),
    Check("local model", system.check_local_model),
    Check("sandbox", system.check_sandbox),
    Check("mcp", check_mcp),
    Check("dashboard port", system.check_dashboard_port),
    Check("traces", system.check_traces),
    Check("clock", remote.check_clock, network=True),
)
# a deep local-model check starts the server: it may take its whole startup timeout
DEEP_EXTRA_S = 15.0


@dataclass(frozen=True, slots=True)
class DoctorReport:
    results: tuple[CheckResult, ...]

    @property
    def failed(self) -> bool:
        return any(r.status is Status.FAIL for r in self.results)

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    def counts(self) -> dict[str, int]:
        return {s.value: sum(r.status is s for r in self.results) for s in Status}

    def as_json(self) -> str:
        return json.dumps({"ok": not self.failed, "counts": self.counts(),
                           "checks": [r.as_dict() for r in self.results]},
                          indent=2, ensure_ascii=False)

    def as_text(self) -> str:
        width = max((len(r.name) for r in self.results), default=0)
        lines = []
        for result in self.results:
            line = f"{result.status.value:<4}  {result.name:<{width}}  {result.message}"
            if result.fix and result.status is not Status.OK:
                line += f" → fix: {result.fix}"
            lines.append(line)
        counts = self.counts()
        lines.append(", ".join(f"{counts[s.value]} {s.value}" for s in
                               (Status.FAIL, Status.WARN, Status.OK, Status.SKIP)))
        return "\n".join(lines)


def _timeout(check: Check, ctx: DoctorContext) -> float:
    if check.name == "local model" and ctx.deep and ctx.settings is not None:
        return float(ctx.settings["LOCAL_MODEL_STARTUP_TIMEOUT_S"]) + DEEP_EXTRA_S
    # local checks run subprocesses (bwrap, the model's python) with their own timeouts
    return ctx.timeout_s + (1.0 if check.network else 30.0)


async def _run_one(check: Check, ctx: DoctorContext) -> list[CheckResult]:
    limit = _timeout(check, ctx)
    try:
        return await asyncio.wait_for(check.run(ctx), limit)
    except TimeoutError:
        what = "no answer" if check.network else "not finished"
        return [fail(check.name, f"{what} within {limit:g} s",
                     "check the network and the URL settings" if check.network else
                     "run `soulflow doctor` again; report it if it keeps happening")]
    except Exception as exc:  # a crashing check is itself a finding; the others still run
        return [fail(check.name, f"the check crashed: {type(exc).__name__}: {exc}"[:300],
                     "report this as a bug")]


async def diagnose(workspace: Path, environ: Mapping[str, str] | None = None, *,
                   timeout_s: float = 10.0, deep: bool = False) -> DoctorReport:
    """Run every check against `workspace` with settings from `environ` (default: os.environ)
    and the workspace's `.env`."""
    ctx = DoctorContext.load(workspace, environ, timeout_s=timeout_s, deep=deep)
    return await run_checks(ctx)


async def run_checks(ctx: DoctorContext,
                     checks: Sequence[Check] = CHECKS) -> DoctorReport:
    """All checks concurrently; results in the order of `checks`, redacted."""
    batches = await asyncio.gather(*(_run_one(check, ctx) for check in checks))
    redactor = _redactor(ctx)
    results = tuple(CheckResult(r.name, r.status, redactor.redact(r.message),
                                redactor.redact(r.fix))
                    for batch in batches for r in batch)
    return DoctorReport(results)


def _redactor(ctx: DoctorContext) -> Redactor:
    """The daemon's rule (secret settings, secret-looking variables of the environment and
    `.env`) minus the settings the catalog declares public: SOULFLOW_MASTER_KEY_FILE names a
    path the report must show, though its name says KEY."""
    public = {s.name for s in SETTINGS if not s.secret}
    known = secret_env_values({k: v for k, v in ctx.raw.items() if k not in public})
    if ctx.settings is not None:
        known += [str(ctx.settings[s.name]) for s in SETTINGS
                  if s.secret and ctx.settings[s.name]]
    return Redactor(known)
