"""Run untrusted Python (from the model, or a user's ``/repl``) without trusting it.

Two walls, so a hole in one is not a hole in the sandbox:

1. **Language**: the code is parsed and checked before anything runs (`_sandbox_policy`): no
   imports, no underscore names or attributes, no frame/code objects, no reflective builtins.
   Only whitelisted builtins and read-only proxies of a few pure modules exist in its namespace.
2. **Process**: it runs in a separate, isolated interpreter (``-I -S``, empty environment, fresh
   temporary working directory, own process group) that limits itself before running the code
   (address space, CPU seconds, no file writes, no new files, no new processes), and the parent
   kills the whole group at the wall-clock timeout.

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
from soulflow.agent.tools.process import OutputPipe, kill_process_group, wait_or_kill

log = logging.getLogger(__name__)

RUNNER = Path(__file__).with_name("_sandbox_runner.py")
STATUS_MARKER = "@@sandbox-status@@ "
_STDERR_CAP = 64 * 1024


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
    timeout_s: float = 5,
    memory_mb: int = 256,
    cpu_s: int = 5,
    max_output: int = 10_000,
) -> SandboxResult:
    """Run ``code`` in the sandbox; the last expression's value is shown like a REPL."""
    try:
        validate(code)
    except SyntaxError as exc:
        return SandboxResult(False, "", describe_syntax_error(exc))
    except SandboxViolation as exc:
        return SandboxResult(False, "", str(exc))
    limits = _Limits(timeout_s, memory_mb, max(1, int(cpu_s)), max_output)
    with tempfile.TemporaryDirectory(prefix="soulflow-sandbox-") as workdir:
        return await _run_child(code, limits, workdir)


async def _run_child(code: str, limits: _Limits, workdir: str) -> SandboxResult:
    # The child caps its own output in characters; this byte cap only guards against a child
    # that misbehaves anyway (4 bytes per character is the UTF-8 worst case).
    out = OutputPipe(limits.max_output * 4 + 1024)
    err = OutputPipe(_STDERR_CAP)
    try:
        out_fd, err_fd = await out.open(), await err.open()
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                "-S",
                str(RUNNER),
                str(limits.memory_mb),
                str(limits.cpu_s),
                str(limits.max_output),
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
