"""The `exec` tool: run a shell command in the workspace, with limits the model cannot lift.

* The command gets a minimal environment (PATH, HOME=workspace, LANG, TERM): the daemon's own
  environment holds API tokens, and ``env`` or a failing ``curl -v`` would print them.
* It runs in its own process group, and the whole group is killed when the command ends, times
  out or is cancelled, so ``sleep 1000 &`` cannot outlive the call. Long-running work belongs to
  the spawn and cron tools, not here.
* stdout and stderr are interleaved (as a terminal shows them) and capped at 50 KB; the rest
  is drained and counted so a chatty command never blocks on a full pipe.
* Destructive commands and commands naming paths outside the workspace need approval
  (see `soulflow.agent.tools.shell_policy`).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

from soulflow.agent.tools.base import Params, Tool, ToolContext, ToolError
from soulflow.agent.tools.process import OutputPipe, wait_or_kill
from soulflow.agent.tools.shell_policy import approval_reason
from soulflow.agent.tools.workspace import resolve_in_workspace

DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 300.0
MAX_OUTPUT_BYTES = 50 * 1024
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_REGISTRY_GRACE_S = 10.0


def minimal_env(workspace: Path) -> dict[str, str]:
    """The only environment a command sees; nothing secret is inherited."""
    return {
        "PATH": os.environ.get("PATH") or DEFAULT_PATH,
        "HOME": str(workspace),
        "PWD": str(workspace),
        "LANG": os.environ.get("LANG") or "C.UTF-8",
        "TERM": "dumb",
    }


class ExecTool(Tool):
    name = "exec"
    description = (
        "Run a shell command (/bin/sh -c) in the workspace and return its combined "
        f"stdout/stderr (max {MAX_OUTPUT_BYTES // 1024} KB) and exit code. Default timeout "
        f"{DEFAULT_TIMEOUT_S:g} s, at most {MAX_TIMEOUT_S:g} s. Background processes are "
        "killed when the command ends. Destructive commands and paths outside the workspace "
        "need the user's approval."
    )
    parameters = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1},
            "timeout_s": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": MAX_TIMEOUT_S,
                "description": f"Seconds before it is killed (default {DEFAULT_TIMEOUT_S:g}).",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    timeout_s = DEFAULT_TIMEOUT_S

    def needs_approval(self, params: Params, ctx: ToolContext) -> str | None:
        return approval_reason(params["command"])

    def timeout_for(self, params: Params) -> float:
        # The command's own timeout fires first and reports partial output; the registry's
        # limit is only a backstop.
        return _command_timeout(params) + _REGISTRY_GRACE_S

    async def run(self, params: Params, ctx: ToolContext) -> str:
        timeout = _command_timeout(params)
        workspace = resolve_in_workspace(ctx.workspace, ".")  # absolute, and it must exist
        result = await run_command(params["command"], workspace, timeout)
        if result.timed_out:
            raise ToolError(
                f"command timed out after {timeout:g} s and was killed (with its whole "
                f"process group). Output so far:\n{result.render()}"
            )
        return result.render()


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What a finished (or killed) command produced; ``dropped`` counts bytes over the cap."""

    output: bytes
    dropped: int
    exit_code: int | None
    timed_out: bool

    def render(self) -> str:
        text = self.output.decode("utf-8", errors="replace")
        if text and not text.endswith("\n"):
            text += "\n"
        if self.dropped:
            text += f"[output truncated: {self.dropped} more bytes]\n"
        if not self.timed_out:
            text += f"[exit code: {self.exit_code}]"
        return text.rstrip("\n")


async def run_command(command: str, workspace: Path, timeout: float) -> CommandResult:
    """Run ``command`` under ``/bin/sh -c``; the process group never outlives this call."""
    output = OutputPipe(MAX_OUTPUT_BYTES)
    try:
        write_fd = await output.open()
        try:
            proc = await asyncio.create_subprocess_exec(
                "/bin/sh",
                "-c",
                command,
                cwd=str(workspace),
                env=minimal_env(workspace),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=write_fd,
                stderr=write_fd,  # interleaved, as a terminal shows them
                start_new_session=True,
            )
        except OSError as exc:  # missing workspace directory or /bin/sh
            raise ToolError(f"could not start the command: {exc.strerror or exc}") from exc
        finally:
            output.close_writer()
        timed_out = await wait_or_kill(proc, timeout)
    finally:
        await output.finish()
    return CommandResult(output.data, output.dropped, proc.returncode, timed_out)


def _command_timeout(params: Params) -> float:
    return min(float(params.get("timeout_s", DEFAULT_TIMEOUT_S)), MAX_TIMEOUT_S)

