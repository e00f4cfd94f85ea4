"""How the daemon reaches one MCP server: a stdio server started inside the kernel sandbox,
or a streamable-HTTP endpoint with its headers.

A stdio server is third-party code the daemon keeps running, so it gets the wall `exec` gets
(`soulflow.agent.tools.bwrap`), minus the chat folder: the workspace read-only at its real
path with ``runtime/``, ``chats/``, every ``.env*`` and the vault key masked; the system
read-only; a private bounded ``/tmp``; its own writable ``HOME`` (``/scratch`` inside, the
host folder ``runtime/mcp/<server>/`` that survives restarts, so package caches do too); no
network unless the operator set ``"network": true``; rlimits on memory, processes, file size
and open files. Where bubblewrap does not work a stdio server does not start at all: nobody
is there to approve a process that runs for hours.

Its environment is exactly the operator's ``env`` (secrets filled in) over a minimal base
(PATH, HOME, LANG, TERM); it reaches the sandbox as bwrap's own environment, never on its
command line, where ``ps`` would show a secret to every user of the machine. What the server
writes to stderr goes to the daemon's log (redacted like every line) and its last lines
into the server's state, so a crash says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
from mcp.client._transport import TransportStreams
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.message import SessionMessage
from mcp_types import jsonrpc_message_adapter

from soulflow.agent.tools.bwrap import (
    LIMITS_LAUNCHER,
    SCRATCH,
    TOOLS_DIR,
    Limits,
    SandboxSpec,
    bwrap_argv,
    limited,
)
from soulflow.agent.tools.mcp_client.command import McpStartError, resolve_command
from soulflow.agent.tools.mcp_client.config import ServerConfig
from soulflow.agent.tools.mcp_client.states import HOMES_DIR
from soulflow.agent.tools.pids_cgroup import PidsCgroup
from soulflow.agent.tools.process import kill_process_group
from soulflow.agent.tools.sandbox import DEFAULT_PATH, CodeSandbox
from soulflow.agent.tools.sandbox_masks import masked_paths

log = logging.getLogger(__name__)

STDERR_LINES = 20
LOGGED_STDERR_LINES = 200  # per start: a server cannot flood the daemon's log
MAX_STDERR_LINE = 400
# a server runs for days: CPU time is not what bounds it (a runaway loop shows in the state)
SERVER_CPU_S = 7 * 24 * 3600
SERVER_MAX_PIDS = 256
CGROUP_SPARE_PIDS = 4  # the join launcher, bwrap, its pid-namespace init and the limits one
SERVER_FILE_SIZE = 512 * 1024 * 1024
SERVER_OPEN_FILES = 1024
SERVER_TMP_BYTES = 64 * 1024 * 1024
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # one JSON-RPC line from a stdio server, at most
STOP_GRACE_S = 2.0


class StderrTail:
    """The server's stderr: every line logged, the last few kept for its state."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.lines: deque[str] = deque(maxlen=STDERR_LINES)
        self.count = 0
        read_fd, write_fd = os.pipe()
        self._read = os.fdopen(read_fd, "rb", buffering=0)
        self.writer = os.fdopen(write_fd, "w")  # given to the child as its stderr
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._pump(), name=f"mcp-stderr:{self.server}")

    async def _pump(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=64 * 1024)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), self._read)
        try:
            while True:
                try:
                    raw = await reader.readuntil(b"\n")
                except asyncio.IncompleteReadError as end:
                    raw = end.partial
                    if not raw:
                        return
                except asyncio.LimitOverrunError as over:
                    raw = await reader.read(over.consumed)
                line = raw.decode("utf-8", "replace").rstrip()[:MAX_STDERR_LINE]
                if not line:
                    continue
                self.lines.append(line)
                self.count += 1
                if self.count <= LOGGED_STDERR_LINES:
                    log.info("mcp server %s: %s", self.server, line)
                elif self.count == LOGGED_STDERR_LINES + 1:
                    log.warning("mcp server %s: more stderr than %d lines; the rest is not "
                                "logged", self.server, LOGGED_STDERR_LINES)
        finally:
            transport.close()

    def tail(self, count: int = 3) -> str:
        return " | ".join(list(self.lines)[-count:])

    async def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.writer.close()
        if self._task is not None:
            try:  # the child is gone: what it wrote last is still read to the end
                await asyncio.wait_for(asyncio.shield(self._task), 1.0)
            except (TimeoutError, Exception):
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task
        with contextlib.suppress(OSError):
            self._read.close()


def server_home(runtime_dir: Path, server: str) -> Path:
    """The server's own writable folder, ``runtime/mcp/<server>/`` (HOME inside)."""
    home = runtime_dir / HOMES_DIR / server
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    return home


def sandboxed_params(sandbox: CodeSandbox, config: ServerConfig, workspace: Path,
                     home: Path, env: dict[str, str], *,
                     cgroup: PidsCgroup | None = None) -> StdioServerParameters:
    """``bwrap ... -- launcher --limits ... -- <command> <args>`` with the environment it
    passes on; with a pids ``cgroup`` (`CodeSandbox.cgroups`: the cap that binds a daemon
    running as root too) the launcher joins it before bwrap starts. Blocking (the mask scan
    walks the workspace): call it off the loop."""
    features = sandbox.detector.features()
    if features is None:
        raise McpStartError("stdio MCP servers run only inside the bubblewrap sandbox, "
                            f"which does not work here: {sandbox.status().detail}")
    real = workspace.resolve()
    program = resolve_command(config.command, real)
    spec = SandboxSpec(cwd=str(real), ro_binds=(real,), scratch=home,
                       masks=tuple(masked_paths(real, sandbox.settings,
                                                scanner=sandbox.scanner)),
                       network=config.network, tmp_bytes=SERVER_TMP_BYTES,
                       env_from_parent=True)
    limits = Limits(cpu_s=SERVER_CPU_S, memory_mb=config.memory_mb,
                    max_pids=SERVER_MAX_PIDS, file_size=SERVER_FILE_SIZE,
                    open_files=SERVER_OPEN_FILES)
    argv = bwrap_argv(features, spec, limited([program, *config.args], limits))
    if cgroup is not None:
        argv = [sys.executable, "-I", "-S", str(TOOLS_DIR / LIMITS_LAUNCHER), "--join",
                str(cgroup.procs_file), "--", *argv]
    base = {"PATH": DEFAULT_PATH, "HOME": SCRATCH, "TMPDIR": "/tmp",
            "LANG": os.environ.get("LANG") or "C.UTF-8", "TERM": "dumb", "USER": "sandbox",
            "LOGNAME": "sandbox", "SHELL": "/bin/sh"}
    # every variable the SDK would inherit from the daemon is set here, so none is
    return StdioServerParameters(command=argv[0], args=argv[1:], env={**base, **env},
                                 encoding_error_handler="replace")


@asynccontextmanager
async def stdio_transport(params: StdioServerParameters, stderr: StderrTail,
                          cgroup: PidsCgroup | None = None) -> AsyncIterator[TransportStreams]:
    """JSON-RPC over the sandboxed server's stdin and stdout, one message a line, as the SDK's
    own stdio transport speaks it, but with a bound: a line longer than `MAX_MESSAGE_BYTES`
    ends the connection (the server is then restarted), so a hostile server cannot fill the
    daemon's memory with one endless line. When it ends: stdin closed, a short grace, then
    the whole process group killed (bwrap, and with it the sandbox's pid namespace)."""
    stderr.start()
    try:
        proc = await asyncio.create_subprocess_exec(
            params.command, *params.args, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=stderr.writer, env=params.env or {},
            start_new_session=True, limit=MAX_MESSAGE_BYTES)
    except BaseException:
        await stderr.stop()
        if cgroup is not None:
            await asyncio.to_thread(cgroup.close)
        raise
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_read_lines, proc, read_send, stderr.server)
            group.start_soon(_write_lines, proc, write_receive)
            try:
                yield read_receive, write_send
            finally:
                group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop_process(proc)
            for stream in (read_receive, write_send, read_send, write_receive):
                await stream.aclose()
            await stderr.stop()
            if cgroup is not None:  # kills whatever is left in it, then removes it
                await asyncio.to_thread(cgroup.close)


async def _read_lines(proc: asyncio.subprocess.Process,
                      out: anyio.abc.ObjectSendStream[SessionMessage | Exception],
                      server: str) -> None:
    assert proc.stdout is not None
    async with out:
        while True:
            try:
                line = await proc.stdout.readuntil(b"\n")
            except asyncio.IncompleteReadError:
                return  # the server closed its stdout (it exited)
            except asyncio.LimitOverrunError:
                log.warning("MCP server %s sent a message over %d bytes; stopping it", server,
                            MAX_MESSAGE_BYTES)
                return
            if not line.strip():
                continue
            try:
                item: SessionMessage | Exception = SessionMessage(
                    jsonrpc_message_adapter.validate_json(line, by_name=False))
            except ValueError as exc:  # the session answers it as a parse error
                item = exc
            try:
                await out.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return


async def _write_lines(proc: asyncio.subprocess.Process,
                       messages: anyio.abc.ObjectReceiveStream[SessionMessage]) -> None:
    assert proc.stdin is not None
    try:
        async with messages:
            async for message in messages:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                proc.stdin.write(data.encode("utf-8") + b"\n")
                await proc.stdin.drain()
    except (ConnectionError, OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass  # the server is gone: its stdout's end tells the session


async def _stop_process(proc: asyncio.subprocess.Process) -> None:
    """Close stdin, give the server `STOP_GRACE_S` to exit, then kill its process group."""
    if proc.stdin is not None:
        with contextlib.suppress(OSError, RuntimeError):
            proc.stdin.close()
    if proc.returncode is None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
    kill_process_group(proc.pid)
    with contextlib.suppress(TimeoutError):  # what is left unread, so the pipe reaches its
        await asyncio.wait_for(_drain(proc), STOP_GRACE_S)  # end and the transport closes
        await asyncio.wait_for(proc.wait(), STOP_GRACE_S)


async def _drain(proc: asyncio.subprocess.Process) -> None:
    if proc.stdout is not None:
        with contextlib.suppress(OSError, ValueError):
            while await proc.stdout.read(1024 * 1024):
                pass


@asynccontextmanager
async def http_transport(url: str, headers: dict[str, str]) -> AsyncIterator[TransportStreams]:
    """The SDK's streamable-HTTP transport, every request carrying ``headers``."""
    async with create_mcp_http_client(headers=headers) as http, \
            streamable_http_client(url, http_client=http) as streams:
        yield streams


@asynccontextmanager
async def watched(transport: contextlib.AbstractAsyncContextManager[TransportStreams],
                  closed: asyncio.Event) -> AsyncIterator[TransportStreams]:
    """``transport``, with ``closed`` set once its read side ends (the process exited, the
    connection dropped): how a crash is noticed at once, and calls in flight end with it."""
    async with transport as (read, write):
        send, receive = anyio.create_memory_object_stream[object](0)

        async def pump() -> None:
            try:
                async with send:
                    async for item in read:
                        await send.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass
            finally:
                closed.set()

        async with anyio.create_task_group() as group:
            group.start_soon(pump)
            try:
                yield receive, write  # type: ignore[misc]
            finally:
                group.cancel_scope.cancel()
