"""The `exec` tool: run a shell command in the workspace, with limits the model cannot lift.

* The boundary is the kernel: the command runs in a bubblewrap sandbox (`CodeSandbox`) that
  sees the workspace read-only (the operator zone: code, virtualenvs, ``.git``, ``scripts/``,
  templates, skills...) and only its own chat folder ``chats/<zone>/`` read-write (its
  ``HOME``); not ``runtime/``, the other chats' folders, ``.env*`` or the vault key; the
  system read-only, a private size-bounded ``/tmp``, no network unless the call asked for it
  (``network: true``, which always needs approval), and rlimits plus a pids cgroup. The
  chat's attachments are in its folder (``files/``). Where bubblewrap does not work, every
  call needs an approval only an admin or the local operator can give, and then runs
  unconfined as the daemon's user (it can then write anywhere the daemon can).
* What a call may add to its chat folder is bounded by the disk quotas
  (`soulflow.security.quota`): a call over one is stopped, fails with the reason, and what
  it added is undone (`sandbox_quota`).
* The command gets a minimal environment (PATH, HOME=its chat folder, LANG, TERM): the
  daemon's own environment holds API tokens, and ``env`` or a failing ``curl -v`` would print
  them. It starts in the workspace root, so paths are the ones the file tools take.
* It runs in its own process group, and the whole group is killed when the command ends, times
  out or is cancelled, so ``sleep 1000 &`` cannot outlive the call. Long-running work belongs to
  the spawn and cron tools, not here.
* stdout and stderr are interleaved (as a terminal shows them) and capped at 50 KB; the rest
  is drained and counted so a chatty command never blocks on a full pipe.
* Destructive commands need approval (see `soulflow.agent.tools.shell_policy`); so do
  commands naming paths outside the workspace when there is no sandbox to contain them.
"""

from __future__ import annotations

import asyncio
import math
import os
from dataclasses import dataclass
from pathlib import Path

from soulflow.agent.tools.base import ApprovalNeed, Params, Tool, ToolContext, ToolError
from soulflow.agent.tools.bwrap import PAGE, Limits, tmpfs_size, tmpfs_skeleton
from soulflow.agent.tools.process import OutputPipe, wait_or_kill
from soulflow.agent.tools.sandbox import CodeSandbox, SandboxRun
from soulflow.agent.tools.sandbox_masks import MaskScanRefused
from soulflow.agent.tools.sandbox_quota import QuotaWatcher
from soulflow.agent.tools.shell_policy import approval_reason, destructive_reason
from soulflow.agent.tools.workspace import resolve_in_workspace
from soulflow.security.quota import ExecBudget, ExecOutcome, QuotaExceeded
from soulflow.security.zones import ChatZone, zone_for
from soulflow.storage.beneath import Beneath

DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 300.0
MAX_OUTPUT_BYTES = 50 * 1024
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_REGISTRY_GRACE_S = 10.0
NETWORK_REASON = "network access requested (the command can reach any host, the LAN included)"
# Inside the sandbox: address space per process, processes, file size, open files.
EXEC_MEMORY_MB = 4096
EXEC_MAX_PIDS = 256
EXEC_FILE_SIZE = 1024 * 1024 * 1024
EXEC_OPEN_FILES = 1024


def minimal_env(workspace: Path, home: Path) -> dict[str, str]:
    """The only environment a command sees; nothing secret is inherited."""
    return {
        "PATH": os.environ.get("PATH") or DEFAULT_PATH,
        "HOME": str(home),
        "PWD": str(workspace),
        "LANG": os.environ.get("LANG") or "C.UTF-8",
        "TERM": "dumb",
    }


class ExecTool(Tool):
    name = "exec"
    description = (
        "Run a shell command (/bin/sh -c) in the workspace root and return its combined "
        f"stdout/stderr (max {MAX_OUTPUT_BYTES // 1024} KB) and exit code. Default timeout "
        f"{DEFAULT_TIMEOUT_S:g} s, at most {MAX_TIMEOUT_S:g} s. Background processes are "
        "killed when the command ends. It runs in a sandbox: the workspace is read-only "
        "except this chat's own folder (chats/<this chat>/, also $HOME), which is where to "
        "write; runtime/, other chats' folders and .env files are hidden; /tmp is private; "
        "there is a disk quota: a write past what the call may still add fails with 'File "
        "too large', and a call over the quota fails and what it added is undone. "
        "There is no network unless you set network=true, which needs the user's approval. "
        "Destructive commands need approval too."
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
            "network": {
                "type": "boolean",
                "description": "Give the command network access (default false); the user "
                "must approve it.",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    timeout_s = DEFAULT_TIMEOUT_S
    runs_code = True  # a secret in its arguments waits for approval (code_secrets)

    def __init__(self, sandbox: CodeSandbox) -> None:
        self.sandbox = sandbox

    def needs_approval(self, params: Params, ctx: ToolContext) -> str | ApprovalNeed | None:
        command = params["command"]
        if not self.sandbox.status().available:
            # unconfined, the command can write the operator's files (code, .env, templates):
            # a change every chat's runs would load, so the requester alone may not allow it
            reasons = [approval_reason(command), self.sandbox.unconfined_reason()]
            return ApprovalNeed("; ".join(r for r in reasons if r), admins_only=True)
        reasons = [destructive_reason(command),
                   NETWORK_REASON if params.get("network") else None]
        return "; ".join(r for r in reasons if r) or None

    def timeout_for(self, params: Params) -> float:
        # The command's own timeout fires first and reports partial output; the registry's
        # limit is only a backstop.
        return _command_timeout(params) + _REGISTRY_GRACE_S

    async def run(self, params: Params, ctx: ToolContext) -> str:
        timeout = _command_timeout(params)
        workspace = resolve_in_workspace(ctx.workspace, ".")  # absolute, and it must exist
        network = bool(params.get("network"))
        zone = zone_for(ctx.chat)
        if (await self.sandbox.ready()).available:
            if network and not ctx.approved:
                raise ToolError(f"not approved: {NETWORK_REASON}")
            result = await run_sandboxed_command(self.sandbox, params["command"], workspace,
                                                 timeout, zone=zone, network=network)
        elif ctx.approved:
            result = await run_command(params["command"], workspace, timeout, zone=zone)
        else:
            raise ToolError(f"not approved: {self.sandbox.unconfined_reason()}")
        if result.over_quota is not None:
            raise ToolError(f"{result.over_quota} Output so far:\n{result.render()}")
        if result.timed_out:
            raise ToolError(
                f"command timed out after {timeout:g} s and was killed (with its whole "
                f"process group). Output so far:\n{result.render()}"
            )
        return result.render()


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What a finished (or killed) command produced; ``dropped`` counts bytes over the cap;
    ``over_quota`` says why the call failed on a disk quota (its additions undone)."""

    output: bytes
    dropped: int
    exit_code: int | None
    timed_out: bool
    over_quota: str | None = None

    def render(self) -> str:
        text = self.output.decode("utf-8", errors="replace")
        if text and not text.endswith("\n"):
            text += "\n"
        if self.dropped:
            text += f"[output truncated: {self.dropped} more bytes]\n"
        if not self.timed_out and self.over_quota is None:
            text += f"[exit code: {self.exit_code}]"
        return text.rstrip("\n")


async def run_sandboxed_command(
    sandbox: CodeSandbox, command: str, workspace: Path, timeout: float, *, zone: ChatZone,
    network: bool = False,
) -> CommandResult:
    """Run ``command`` under ``/bin/sh -c`` in the sandbox, with ``zone``'s folder as its
    writable home, within the disk quotas; nothing it starts outlives the call.
    """
    async with sandbox.zone_lock(zone):
        run, output, outcome = await _run_in_budget(sandbox, command, workspace, timeout,
                                                    zone=zone, network=network)
    over = outcome.message() if outcome.reason is not None else None
    timed_out = run.timed_out and over is None
    return CommandResult(output.data, output.dropped, run.returncode, timed_out, over)


async def _run_in_budget(
    sandbox: CodeSandbox, command: str, workspace: Path, timeout: float, *, zone: ChatZone,
    network: bool,
) -> tuple[SandboxRun, OutputPipe, ExecOutcome]:
    """Snapshot the chat's folder, run the command within its disk budget, settle."""
    try:  # off the loop: both walk folders (the chat's, then the operator zone's)
        budget = await asyncio.to_thread(sandbox.quotas.begin_exec, workspace, zone)
    except QuotaExceeded as exc:
        raise ToolError(str(exc)) from None
    except OSError as exc:  # chats/ is a link, not a folder, unreadable...
        raise ToolError(f"exec cannot use this chat's folder {zone.rel}/: {exc}") from None
    try:
        tmp_bytes = tmpfs_size(budget.allowed.bytes + PAGE)
        try:
            spec = await asyncio.to_thread(sandbox.exec_spec, workspace, zone=zone,
                                           zone_fd=budget.fd, network=network,
                                           tmp_bytes=tmp_bytes)
        except MaskScanRefused as exc:
            raise ToolError(str(exc)) from None
        limits = Limits(cpu_s=math.ceil(timeout) + 1, memory_mb=EXEC_MEMORY_MB,
                        max_pids=EXEC_MAX_PIDS,
                        file_size=min(EXEC_FILE_SIZE, budget.file_size_limit),
                        open_files=EXEC_OPEN_FILES)
        output = OutputPipe(MAX_OUTPUT_BYTES)
        watcher = QuotaWatcher(budget, tmp_bytes if sandbox.tmpfs_sized() else None,
                               tmpfs_skeleton(spec))
        try:
            run = await sandbox.run(spec, ["/bin/sh", "-c", command], limits, timeout, output,
                                    monitor=watcher)
        except OSError as exc:  # bwrap vanished since it was probed
            raise ToolError(f"could not start the sandbox: {exc.strerror or exc}") from exc
        except asyncio.CancelledError:  # aborted or timed out: the quotas hold all the same
            await _settled(budget, None)
            raise
        outcome = await _settled(budget, run.stopped)
    finally:
        budget.close()
    return run, output, outcome


async def _settled(budget: ExecBudget, stopped: str | None) -> ExecOutcome:
    """`ExecBudget.settle` off the loop; if this task is cancelled meanwhile, the settling
    still finishes before the budget's descriptor may be closed."""
    work = asyncio.get_running_loop().run_in_executor(None, budget.settle, stopped)
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        await asyncio.wait([work])
        raise


async def run_command(command: str, workspace: Path, timeout: float, *,
                      zone: ChatZone) -> CommandResult:
    """Run ``command`` under ``/bin/sh -c`` unconfined (approved calls where there is no
    sandbox), from the workspace root with ``zone``'s folder as HOME; the process group
    never outlives this call. Nothing bounds what it writes: it runs as the daemon."""
    await asyncio.to_thread(Beneath(workspace).make_dirs, zone.rel)
    output = OutputPipe(MAX_OUTPUT_BYTES)
    try:
        write_fd = await output.open()
        try:
            proc = await asyncio.create_subprocess_exec(
                "/bin/sh",
                "-c",
                command,
                cwd=str(workspace),
                env=minimal_env(workspace, workspace / zone.rel),
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

