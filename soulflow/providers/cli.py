"""Providers that drive a coding-agent CLI (`codex exec`, `claude -p`) in headless mode.

These CLIs ride on a login the user already has (a ChatGPT or Claude subscription), so they make
a model usable without an API key. Each chat turn is one CLI run: the flattened conversation goes
in on stdin (never argv, which has a size limit and is visible to every local user through `ps`)
and the reply comes back on stdout. The CLIs cannot hand our tool calls back natively, so tools
are described in the prompt and called as text blocks (see `toolcall_text`). The child gets its
own session, so an abort or timeout kills it together with everything it spawned, and only
allow-listed environment variables, so the daemon's own secrets never reach it.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import inspect
import json
import os
import re
import shutil
import signal
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soulflow.agent.toolcall_text import (
    TextStreamFilter,
    parse_text_tool_calls,
    render_tool_instructions,
)
from soulflow.contracts import ProviderError, ProviderResult, StreamCallback
from soulflow.providers.base import race_abort, refuse_unstartable_turn

# `-` makes codex read the prompt from stdin; a read-only sandbox because chat users, not the
# operator, write these prompts; no git check because the daemon's cwd need not be a repo.
DEFAULT_ARGV: dict[str, list[str]] = {
    "chatgpt": ["codex", "exec", "--skip-git-repo-check", "--sandbox", "read-only",
                "--color", "never", "-"],
    "claude_code": ["claude", "-p", "--output-format", "text"],
}
ALWAYS_PASSED_ENV = ("PATH", "HOME", "LANG")
STDERR_TAIL_CHARS = 300
KILL_GRACE_S = 2.0
_READ_CHUNK = 65536
_STDERR_KEEP_BYTES = 8192

# Checked in order against the stderr of a failed run; anything else is `bad_response`.
_FAILURE_KINDS = (
    ("rate_limited", re.compile(r"rate.?limit|too many requests|\b429\b|usage limit", re.I)),
    ("auth", re.compile(r"not logged in|log ?in again|/login|unauthori[sz]ed|invalid api key"
                        r"|\b401\b|authentication (failed|required|error)", re.I)),
    ("server", re.compile(r"overloaded|\b(500|502|503|504|529)\b|internal server error"
                          r"|service unavailable|bad gateway|temporarily|timed out"
                          r"|connection (reset|refused|error)|network error", re.I)),
)


@dataclass(slots=True)
class CliProviderResult(ProviderResult):
    """A ProviderResult plus the text tool-call blocks that could not be parsed, so the agent
    can tell the model its call was malformed (the raw block also stays in `content`)."""

    tool_call_errors: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Run:
    """What one CLI run produced."""

    returncode: int
    stdout: str
    stderr: str


class HeadlessCliProvider:
    """`Provider` implementation running a CLI once per chat turn, prompt on stdin."""

    def __init__(
        self,
        name: str,
        argv: list[str] | None = None,
        *,
        timeout_s: float = 300.0,
        cwd: str | os.PathLike[str] | None = None,
        env_allow: Iterable[str] = (),
        max_output_bytes: int = 1_000_000,
        environ: Mapping[str, str] | None = None,
        kill_grace_s: float = KILL_GRACE_S,
    ) -> None:
        """`argv` defaults to DEFAULT_ARGV[name]. `env_allow` names the variables passed to the
        CLI besides PATH/HOME/LANG (a trailing `*` allows a prefix). `environ` is where they are
        read from (default: the daemon's environment at call time)."""
        argv = list(argv if argv is not None else DEFAULT_ARGV.get(name, []))
        if not argv:
            raise ValueError(f"no command line for provider {name!r}; pass argv")
        self.name = name
        self.argv = argv
        self.timeout_s = timeout_s
        self.cwd = cwd
        self.env_allow = list(env_allow)
        self.max_output_bytes = max_output_bytes
        self.kill_grace_s = kill_grace_s
        self._environ = environ
        self._running: set[asyncio.subprocess.Process] = set()
        self._closed = False

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                   *, on_stream: StreamCallback | None = None,
                   abort: asyncio.Event | None = None) -> ProviderResult:
        """Run the CLI on the conversation; raises ProviderError on any failure, including abort."""
        refuse_unstartable_turn(self._closed, abort, self._error)
        env = self._child_env()
        program = self._resolve(env)
        prompt = build_prompt(messages, tools)
        work = self._run([program, *self.argv[1:]], env, prompt, on_stream)
        try:
            async with asyncio.timeout(self.timeout_s):
                run = await (work if abort is None else race_abort(work, abort, lambda: self._error(
                    "aborted", "the request was aborted while the CLI was running")))
        except TimeoutError:
            raise self._error("timeout", f"no answer within {self.timeout_s:g}s") from None
        return self._result(run, tools)

    async def close(self) -> None:
        """Kill runs still in flight (daemon shutdown); later calls fail fast."""
        self._closed = True
        await asyncio.gather(*(self._kill_group(proc) for proc in list(self._running)))

    # -- running the CLI --------------------------------------------------------------------

    def _child_env(self) -> dict[str, str]:
        source = os.environ if self._environ is None else self._environ
        exact = {*ALWAYS_PASSED_ENV, *(n for n in self.env_allow if not n.endswith("*"))}
        prefixes = tuple(n[:-1] for n in self.env_allow if n.endswith("*"))
        return {k: v for k, v in source.items() if k in exact or (prefixes and
                                                                    k.startswith(prefixes))}

    def _resolve(self, env: Mapping[str, str]) -> str:
        """The executable's path, looked up on the PATH the child will get."""
        program = shutil.which(self.argv[0], path=env.get("PATH", os.defpath))
        if program is None:
            raise self._error(
                "not_configured",
                f"the `{self._command}` command was not found on PATH; "
                "install it or choose another PROVIDER",
            )
        return program

    async def _run(
        self, argv: list[str], env: dict[str, str], prompt: str, on_stream: StreamCallback | None
    ) -> _Run:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, cwd=self.cwd, env=env, start_new_session=True,
            )
        except OSError as exc:  # vanished since lookup, not executable, bad cwd
            raise self._error("not_configured", f"could not start `{self._command}`: {exc}"
                              ) from None
        self._running.add(proc)
        helpers = [asyncio.ensure_future(_feed_stdin(proc, prompt)),
                   asyncio.ensure_future(_read_tail(proc, _STDERR_KEEP_BYTES))]
        try:
            stdout = await self._read_stdout(proc, on_stream)
            returncode = await proc.wait()
            stderr = await helpers[1]
            return _Run(returncode, stdout, stderr)
        finally:
            for helper in helpers:
                helper.cancel()
            if proc.returncode is None:  # abandoned: aborted, timed out, too much output
                await self._kill_group(proc)
            self._running.discard(proc)

    async def _read_stdout(
        self, proc: asyncio.subprocess.Process, on_stream: StreamCallback | None
    ) -> str:
        """Read stdout to EOF, forwarding text as it arrives (minus tool-call blocks)."""
        assert proc.stdout is not None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        gate = TextStreamFilter()
        parts: list[str] = []
        size = 0
        while chunk := await proc.stdout.read(_READ_CHUNK):
            size += len(chunk)
            if size > self.max_output_bytes:
                raise self._error("bad_response",
                                  f"output exceeded {self.max_output_bytes} bytes; stopped it")
            text = decoder.decode(chunk)
            parts.append(text)
            if on_stream is not None and text:
                await _emit(on_stream, gate.feed(text))
        parts.append(decoder.decode(b"", final=True))
        if on_stream is not None:
            await _emit(on_stream, gate.feed(parts[-1]) + gate.flush())
        return "".join(parts)

    async def _kill_group(self, proc: asyncio.subprocess.Process) -> None:
        """SIGTERM the CLI's whole process group, SIGKILL it after the grace period. The group
        also gets SIGKILL when the leader obeyed, for children that ignored SIGTERM."""
        pgid = proc.pid  # start_new_session makes the child its group's leader
        _signal_group(pgid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(proc.wait()), self.kill_grace_s)
        _signal_group(pgid, signal.SIGKILL)
        await proc.wait()

    # -- interpreting the run ---------------------------------------------------------------

    def _result(self, run: _Run, tools: list[dict[str, Any]] | None) -> CliProviderResult:
        if run.returncode != 0:
            raise self._failure(run)
        if not run.stdout.strip():
            detail = f"; stderr: {_tail(run.stderr)}" if run.stderr.strip() else ""
            raise self._error("bad_response", f"`{self._command}` printed nothing{detail}")
        known = {_tool_name(tool) for tool in tools} if tools else None
        # Ids unique to this reply, as an API's would be: the agent keys approvals by call id.
        prefix = f"call_text_{uuid.uuid4().hex[:8]}_"
        parsed = parse_text_tool_calls(run.stdout, known, id_prefix=prefix)
        return CliProviderResult(
            content=parsed.remaining_text,
            tool_calls=parsed.calls,
            finish_reason="tool_calls" if parsed.calls else "stop",
            provider=self.name,
            model=Path(self.argv[0]).name,
            tool_call_errors=parsed.errors,
        )

    def _failure(self, run: _Run) -> ProviderError:
        """Classify a failed run by what it said, so transient failures can fail over."""
        said = run.stderr if run.stderr.strip() else run.stdout
        if run.returncode < 0:
            how, kind = f"was killed by signal {-run.returncode}", "server"
        else:
            how = f"exited with status {run.returncode}"
            kind = next((k for k, pattern in _FAILURE_KINDS if pattern.search(said)),
                        "bad_response")
        return self._error(kind, f"`{self._command}` {how}: {_tail(said) or '(no output)'}")

    @property
    def _command(self) -> str:
        return Path(self.argv[0]).name

    def _error(self, kind: str, message: str) -> ProviderError:
        return ProviderError(kind, message, provider=self.name)


def build_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """The conversation as one text: system messages, tool instructions, then labelled turns.
    The model's own earlier calls are shown in the format it is asked to use, to reinforce it."""
    system = [_text(m.get("content")) for m in messages if m.get("role") == "system"]
    if tools:
        system.append(render_tool_instructions(tools))
    names_by_id: dict[str, str] = {}
    turns: list[str] = []
    for message in messages:
        role = message.get("role")
        if role == "user":
            turns.append(f"User: {_text(message.get('content'))}")
        elif role == "assistant":
            turns.append(f"Assistant: {_assistant_text(message, names_by_id)}")
        elif role == "tool":
            name = message.get("name") or names_by_id.get(message.get("tool_call_id", ""), "tool")
            turns.append(f"Tool result ({name}): {_text(message.get('content'))}")
    return "\n\n".join(part for part in [*system, *turns] if part.strip()) + "\n"


def _assistant_text(message: dict[str, Any], names_by_id: dict[str, str]) -> str:
    parts = [_text(message.get("content"))]
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        name = str(function.get("name") or "")
        names_by_id[str(call.get("id") or "")] = name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments)
        block = json.dumps({"name": name, "arguments": arguments or {}}, ensure_ascii=False)
        parts.append(f"```tool_call\n{block}\n```")
    return "\n".join(part for part in parts if part)


def _text(content: Any) -> str:
    """Text of a message `content`: a string, or the text parts of a multi-part list."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content
                       if isinstance(p, dict) and p.get("type") == "text")
    return content if isinstance(content, str) else ""


def _tool_name(tool: dict[str, Any]) -> str:
    spec = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    return str(spec.get("name", ""))


def _tail(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= STDERR_TAIL_CHARS else "..." + flat[-(STDERR_TAIL_CHARS - 3):]


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _feed_stdin(proc: asyncio.subprocess.Process, prompt: str) -> None:
    """Write the prompt and close stdin, so the CLI sees EOF; a CLI that exits without reading
    it all (an early error) is not our failure to report."""
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(prompt.encode("utf-8"))
        await proc.stdin.drain()
        proc.stdin.close()
        await proc.stdin.wait_closed()


async def _read_tail(proc: asyncio.subprocess.Process, keep: int) -> str:
    """Read stderr to EOF keeping only its last `keep` bytes: progress logs can be long."""
    assert proc.stderr is not None
    tail = b""
    while chunk := await proc.stderr.read(_READ_CHUNK):
        tail = (tail + chunk)[-keep:]
    return tail.decode("utf-8", "replace")


async def _emit(on_stream: StreamCallback, text: str) -> None:
    if not text:
        return
    result = on_stream(text)
    if inspect.isawaitable(result):
        await result
