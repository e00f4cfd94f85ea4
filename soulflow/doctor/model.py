"""What a doctor check is and what it reports.

A check is a named coroutine function taking the shared `DoctorContext` and returning one or
more `CheckResult`s. Results carry a status, a sentence saying what was found, and - when
something is wrong - the exact fix (a command to run or a setting to change), because a
report that only says "broken" sends the operator searching.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from soulflow.config import ConfigError, Settings, load_settings, read_env_file


class Status(StrEnum):
    """Ordered by severity: only FAIL makes `soulflow doctor` exit non-zero."""

    OK = "ok"
    SKIP = "skip"
    WARN = "warn"
    FAIL = "FAIL"


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One line of the report: `name` names the thing checked (e.g. "channel slack")."""

    name: str
    status: Status
    message: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status.value, "message": self.message,
                "fix": self.fix}


@dataclass(slots=True)
class DoctorContext:
    """Everything the checks share: the workspace, the parsed settings (None when they do not
    parse: the settings check reports why, checks that need them are skipped) and the raw
    merged values, so file checks still find the key when another setting is invalid."""

    workspace: Path
    environ: Mapping[str, str]
    settings: Settings | None
    settings_error: str | None
    raw: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 10.0
    deep: bool = False
    clock: Callable[[], float] = time.time  # wall clock, compared with a platform's Date

    @classmethod
    def load(cls, workspace: Path, environ: Mapping[str, str] | None = None, *,
             timeout_s: float = 10.0, deep: bool = False) -> DoctorContext:
        env = os.environ if environ is None else environ
        settings: Settings | None = None
        error: str | None = None
        from_file: dict[str, str] = {}
        if workspace.is_dir():
            try:
                from_file = read_env_file(workspace)  # refused: the `.env` check says why
                settings = load_settings(workspace, env)
            except ConfigError as exc:
                error = str(exc)
        else:
            error = f"the workspace {workspace} does not exist"
        raw = {**from_file, **env}
        return cls(workspace, env, settings, error, {k: str(v) for k, v in raw.items()},
                   timeout_s, deep)

    def setting(self, name: str) -> Any:
        """A parsed setting, or the raw text when the settings did not parse."""
        if self.settings is not None:
            return self.settings[name]
        return self.raw.get(name, "")


CheckFn = Callable[[DoctorContext], Awaitable[list[CheckResult]]]


@dataclass(frozen=True, slots=True)
class Check:
    """A named check; `network` ones get the timeout and a "cannot reach" reading on expiry."""

    name: str
    run: CheckFn
    network: bool = False


def ok(name: str, message: str) -> CheckResult:
    return CheckResult(name, Status.OK, message)


def warn(name: str, message: str, fix: str = "") -> CheckResult:
    return CheckResult(name, Status.WARN, message, fix)


def fail(name: str, message: str, fix: str = "") -> CheckResult:
    return CheckResult(name, Status.FAIL, message, fix)


def skip(name: str, message: str) -> CheckResult:
    return CheckResult(name, Status.SKIP, message)
