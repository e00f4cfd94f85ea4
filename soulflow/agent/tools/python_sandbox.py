"""Run untrusted Python (from the model, or a user's ``/repl``) without trusting it.

The boundary is the kernel: the code runs in a bubblewrap sandbox (`CodeSandbox`: new user,
pid, ipc and network namespaces, read-only system, a scratch directory and nothing of the
workspace, rlimits, a pids cgroup where the host has one, a wall-clock kill).

Inside it a separate, isolated interpreter (``-I -S``, empty environment) runs
`_sandbox_runner`, which keeps two older layers as *friendly early refusals*, not as the wall:
the AST rules of `_sandbox_policy` (no imports, underscore names, frames, reflective builtins)
tell the model at once why its code will not run, and the runner limits itself further (no
file writes, no new files, no new processes) before running the code.

Where bubblewrap does not work the code runs only when the caller says the user approved
running it unconfined (``allow_unconfined``); otherwise the result says why it did not run.

`run_python` never raises for anything the code does: every outcome is a `SandboxResult`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from soulflow.agent.tools._sandbox_policy import (
    SandboxViolation,
    describe_syntax_error,
    validate,
)
from soulflow.agent.tools.bwrap import IN_SANDBOX_TOOLS, Limits
from soulflow.agent.tools.process import OutputPipe, kill_process_group, wait_or_kill
from soulflow.agent.tools.sandbox import CodeSandbox

log = logging.getLogger(__name__)

RUNNER = Path(__file__).with_name("_sandbox_runner.py")
STATUS_MARKER = "@@sandbox-status@@ "
_STDERR_CAP = 64 * 1024
_MAX_PIDS = 8  # the runner forbids new processes itself; this is the kernel's backstop


@dataclass(frozen=True, slots=True)
class SandboxResult:
    """``output`` is what the code printed (possibly partial); ``error`` says why it failed."""

    ok: bool
    output: str
    error: str | None = None

    def render(self) -> str:
        """Output and error as one text, the way a REPL shows them."""
        if self.ok:
            return self.output
        parts = [self.output.rstrip("\n")] if self.output else []
        parts.append(f"Error: {self.error}")
        return "\n".join(parts)


@dataclass(frozen=True, slots=True)
class _Limits:
    timeout_s: float
    memory_mb: int
    cpu_s: int
    max_output: int


async def run_python(
    code: str,
    *,
    sandbox: CodeSandbox,
    allow_unconfined: bool = False,
    timeout_s: float = 5,
    memory_mb: int = 256,
    cpu_s: int = 5,
    max_output: int = 10_000,
) -> SandboxResult:
    """Run ``code`` in ``sandbox``; the last expression's value is shown like a REPL.

    ``allow_unconfined``: the user approved running it where bubblewrap does not work.
    """
    try:
        validate(code)
    except SyntaxError as exc:
        return SandboxResult(False, "", describe_syntax_error(exc))
    except SandboxViolation as exc:
        return SandboxResult(False, "", str(exc))
    limits = _Limits(timeout_s, memory_mb, max(1, int(cpu_s)), max_output)
    status = await sandbox.ready()
    with tempfile.TemporaryDirectory(prefix="soulflow-sandbox-") as workdir:
        if status.available:
            return await _run_sandboxed(sandbox, code, limits, Path(workdir))
        if allow_unconfined:
            return await _run_child(code, limits, workdir)
    reason = f"{sandbox.unconfined_reason()}; not run without approval ({status.detail})"
    return SandboxResult(False, "", reason)


def runner_argv(limits: _Limits, runner: str) -> list[str]:
    """The interpreter running ``runner`` (a path as the child sees it) with ``limits``."""
    return [sys.executable, "-I", "-S", runner, str(limits.memory_mb), str(limits.cpu_s),
            str(limits.max_output)]


async def _run_sandboxed(
    sandbox: CodeSandbox, code: str, limits: _Limits, scratch: Path
) -> SandboxResult:
    out = OutputPipe(limits.max_output * 4 + 1024)
    err = OutputPipe(_STDERR_CAP)
    rlimits = Limits(cpu_s=limits.cpu_s, memory_mb=limits.memory_mb, max_pids=_MAX_PIDS,
                     file_size=1024 * 1024, open_files=64)
    inner = runner_argv(limits, f"{IN_SANDBOX_TOOLS}/{RUNNER.name}")
    run = await sandbox.run(sandbox.python_spec(scratch), inner, rlimits, limits.timeout_s,
                            out, err, stdin=code.encode("utf-8", errors="surrogatepass"))
    returncode = run.returncode
    if returncode is not None and returncode > 128:  # bwrap reports a signal as 128 + number
        returncode = -(returncode - 128)
    return _interpret(out.text(), err.text(), returncode, run.timed_out, limits)


async def _run_child(code: str, limits: _Limits, workdir: str) -> SandboxResult:
    """The unconfined path (approved only): the runner straight under the daemon's user."""
    # The child caps its own output in characters; this byte cap only guards against a child
    # that misbehaves anyway (4 bytes per character is the UTF-8 worst case).
    out = OutputPipe(limits.max_output * 4 + 1024)
    err = OutputPipe(_STDERR_CAP)
    try:
        out_fd, err_fd = await out.open(), await err.open()
        try:
            proc = await asyncio.create_subprocess_exec(
                *runner_argv(limits, str(RUNNER)),
                stdin=asyncio.subprocess.PIPE,
                stdout=out_fd,
                stderr=err_fd,
                cwd=workdir,
                env={},
                start_new_session=True,
            )
        finally:
            out.close_writer()
            err.close_writer()
        assert proc.stdin is not None
        try:
            await _feed(proc.stdin, code)
            timed_out = await wait_or_kill(proc, limits.timeout_s)
        finally:
            kill_process_group(proc.pid)  # also when cancelled while feeding the code
    finally:
        await out.finish()
        await err.finish()
    return _interpret(out.text(), err.text(), proc.returncode, timed_out, limits)


async def _feed(stdin: asyncio.StreamWriter, code: str) -> None:
    try:
        stdin.write(code.encode("utf-8", errors="surrogatepass"))
        await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the child died early; its exit status tells the story
    finally:
        stdin.close()


def _interpret(
    stdout: str, stderr: str, returncode: int | None, timed_out: bool, limits: _Limits
) -> SandboxResult:
    """Turn what the child left behind into a result a person can read."""
    status = _parse_status(stderr)
    output = stdout
    dropped = status.get("dropped", 0) if status else 0
    if dropped:
        output = output.rstrip("\n") + f"\n[output truncated: {dropped} more characters]\n"
    if timed_out:
        return SandboxResult(False, output, f"timed out after {limits.timeout_s:g} s")
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL) and status is None:
        return SandboxResult(False, output, f"CPU time limit of {limits.cpu_s} s exceeded")
    if status is None:
        tail = stderr.strip().splitlines()[-1:] or [""]
        log.warning("sandbox child ended without a status (rc=%s): %s", returncode, tail[0])
        crashed = f"the sandbox process crashed (exit status {returncode})"
        return SandboxResult(False, output, crashed)
    if status.get("ok"):
        return SandboxResult(True, output)
    if status.get("kind") == "memory":
        return SandboxResult(False, output, f"memory limit of {limits.memory_mb} MB exceeded")
    return SandboxResult(False, output, str(status.get("error") or "unknown error"))


def _parse_status(stderr: str) -> dict | None:
    for line in reversed(stderr.splitlines()):
        if line.startswith(STATUS_MARKER):
            try:
                status = json.loads(line[len(STATUS_MARKER) :])
            except ValueError:
                return None
            return status if isinstance(status, dict) else None
    return None
