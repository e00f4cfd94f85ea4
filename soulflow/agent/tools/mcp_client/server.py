"""One configured MCP server kept running: connect, list its tools, serve calls, and after a
crash start again with a growing backoff.

`McpServer.run` is the server's supervised loop (one named task per server, ``mcp:<name>``).
It never raises for the server's own failures: a program that cannot start, a handshake that
times out, a process that dies or an endpoint that stops answering are each recorded in the
server's `ServerState` (shown by ``/api/state``, ``soulflow status`` and the page) and retried
after `Backoff`; the daemon and the other servers carry on.

Calls (`call`) come from many runs at once and are independent JSON-RPC requests on the one
connection, so a slow tool holds only its own caller; each has the server's ``timeoutS``, and
a call in flight when the connection dies ends at once with that news rather than at its
timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import mcp_types
from mcp import Client
from mcp.client._transport import TransportStreams
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, Implementation
from mcp_types import Tool as RemoteTool
from pydantic import ValidationError

from soulflow import __version__
from soulflow.agent.errors import AgentError
from soulflow.agent.tools.base import ToolError
from soulflow.agent.tools.mcp_client.config import ServerConfig, Transport
from soulflow.agent.tools.mcp_client.states import (
    DEFAULT_BACKOFF,
    PROBE_INTERVAL_S,
    Backoff,
    ServerStatus,
)
from soulflow.agent.tools.mcp_client.tool import START_WAIT_S

log = logging.getLogger(__name__)

START_TIMEOUT_S = START_WAIT_S  # the handshake and first listing; a call waits as long
MAX_LISTED_TOOLS = 128  # what OpenAI takes in one request, all tools together
_LIST_PAGES = 20

Connect = Callable[[asyncio.Event], Awaitable[
    tuple[AbstractAsyncContextManager[TransportStreams], Callable[[], str]]]]
"""Opens the way to the server for one attempt: the transport (already `watched` with the
given event) and a function telling what the server last said on stderr."""


@dataclass(slots=True)
class ServerState:
    status: ServerStatus = ServerStatus.STARTING
    since: float = field(default_factory=time.time)
    tools: list[str] = field(default_factory=list)
    restarts: int = 0
    failures: int = 0  # in a row, since it last stayed up
    last_error: str = ""
    retry_at: float | None = None
    probes: int = 0  # liveness checks answered (HTTP)


class McpServer:
    """A configured server: its loop (`run`), its calls (`call`) and its state."""

    def __init__(self, config: ServerConfig, connect: Connect, *,
                 on_tools: Callable[[McpServer, list[RemoteTool]], Awaitable[None]],
                 backoff: Backoff = DEFAULT_BACKOFF, redact: Callable[[str], str] = str,
                 probe_interval_s: float = PROBE_INTERVAL_S) -> None:
        self.config = config
        self.name = config.name
        self._connect = connect
        self._on_tools = on_tools
        self._backoff = backoff
        self._redact = redact
        self._probe_interval_s = probe_interval_s
        self.state = ServerState()
        self._client: Client | None = None
        self._closed = asyncio.Event()
        self._up = asyncio.Event()  # set while running: calls made while it starts wait

    # -- the loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Connect, serve until the connection ends, wait, again; until cancelled."""
        loop = asyncio.get_running_loop()
        delay = self._backoff.initial
        while True:
            started = loop.time()
            try:
                error = await self._serve()
            except asyncio.CancelledError:
                self._set(ServerStatus.STOPPED)
                raise
            except Exception as exc:  # whatever the server or its transport did
                error = describe_error(exc)
            finally:
                self._client = None
                self._closed.set()  # calls in flight end now
            if loop.time() - started >= self._backoff.stable_after:
                delay = self._backoff.initial
                self.state.failures = 0
            self.state.failures += 1
            self.state.restarts += 1
            self.state.last_error = self._redact(error)[:500]
            self.state.retry_at = time.time() + delay
            self._set(ServerStatus.RESTARTING)
            log.warning("MCP server %s stopped: %s; starting it again in %.1f s", self.name,
                        self.state.last_error, delay)
            await asyncio.sleep(delay)
            delay = min(self._backoff.maximum, delay * 2)

    async def _serve(self) -> str:
        """One connection, from start to its end; returns why it ended."""
        self._set(ServerStatus.STARTING)
        closed = asyncio.Event()
        transport, stderr_tail = await self._connect(closed)
        client = Client(transport, cache=None, read_timeout_seconds=START_TIMEOUT_S,
                        client_info=Implementation(name="soulflow", version=__version__))
        failure: Exception | None = None
        async with AsyncExitStack() as stack:
            try:
                await stack.enter_async_context(client)
                tools = await _list_tools(client)
            except Exception as exc:
                failure = exc
            else:
                self._closed = closed
                self._client = client
                self.state.tools = [t.name for t in tools]
                self.state.retry_at = None
                await self._on_tools(self, tools)  # registered (and kept) before any call
                self._set(ServerStatus.RUNNING)
                log.info("MCP server %s running with %d tool(s)", self.name, len(tools))
                await self._until_closed(client, closed)
        # the transport is closed: what the server wrote on stderr last has been read
        said = stderr_tail()
        suffix = f" (stderr: {said})" if said else ""
        if failure is not None:
            raise McpServerFailed(f"could not start: {describe_error(failure)}{suffix}") \
                from failure
        ended = "the server exited" if self.config.transport is Transport.STDIO else \
            "the connection closed"
        return ended + suffix

    async def _until_closed(self, client: Client, closed: asyncio.Event) -> None:
        """Until the transport's read side ends; an HTTP endpoint is also probed (a tools
        listing every `PROBE_INTERVAL_S`), since a dead host closes nothing."""
        if self.config.transport is Transport.STDIO:
            await closed.wait()
            return
        while not closed.is_set():
            try:
                await asyncio.wait_for(closed.wait(), self._probe_interval_s)
            except TimeoutError:
                try:  # a listing: ping is gone from the 2026 protocol
                    await asyncio.wait_for(client.list_tools(), self._probe_interval_s)
                except Exception as exc:
                    raise McpServerFailed(f"stopped answering: {describe_error(exc)}") from exc
                self.state.probes += 1

    def _set(self, status: ServerStatus) -> None:
        if status is ServerStatus.RUNNING:
            self._up.set()
        else:
            self._up.clear()
        if self.state.status is not status:
            self.state.status = status
            self.state.since = time.time()

    # -- calls -------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallToolResult:
        """Call ``tool``; a `ToolError` the model can read if the server is not running, the
        call times out, the server answers with an error or dies meanwhile. A call made while
        the server is starting (after a daemon restart its tools are listed from the last
        listing) waits for it, up to `START_TIMEOUT_S`."""
        if self.state.status is ServerStatus.STARTING:  # at boot: its listing is known
            try:
                await asyncio.wait_for(self._up.wait(), START_TIMEOUT_S)
            except TimeoutError:
                pass
        client, closed = self._client, self._closed
        if client is None or closed.is_set() or self.state.status is not ServerStatus.RUNNING:
            raise ToolError(self.unavailable())
        timeout = self.config.timeout_s
        request = asyncio.ensure_future(
            client.call_tool(tool, arguments, read_timeout_seconds=timeout))
        ended = asyncio.ensure_future(closed.wait())
        try:
            done, _ = await asyncio.wait({request, ended}, timeout=timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
            if not request.done():
                request.cancel()
                await asyncio.wait({request})
        if request not in done or request.cancelled():
            if closed.is_set():
                raise ToolError(f"MCP server {self.name} stopped during the call; it is "
                                "being started again")
            raise ToolError(f"MCP tool {tool} of server {self.name} timed out after "
                            f"{timeout:g} s")
        error = request.exception()
        if error is None:
            return request.result()
        if closed.is_set() or (isinstance(error, MCPError)
                               and error.code == mcp_types.CONNECTION_CLOSED):
            raise ToolError(f"MCP server {self.name} stopped during the call; it is "
                            "being started again")
        if isinstance(error, MCPError):
            if error.code == mcp_types.REQUEST_TIMEOUT:
                raise ToolError(f"MCP tool {tool} of server {self.name} timed out after "
                                f"{timeout:g} s")
            raise ToolError(f"MCP server {self.name} refused the call: {error.message}")
        if isinstance(error, ValidationError):
            raise ToolError(f"MCP server {self.name} sent a malformed result")
        if isinstance(error, TimeoutError):
            raise ToolError(f"MCP tool {tool} of server {self.name} timed out after "
                            f"{timeout:g} s")
        raise ToolError(f"MCP server {self.name}: the call failed "
                        f"({describe_error(error)})")

    def unavailable(self) -> str:
        state = self.state
        text = f"MCP server {self.name} is not running ({state.status.value}"
        if state.last_error:
            text += f": {state.last_error}"
        if state.retry_at is not None:
            text += f"; next start in {max(0, round(state.retry_at - time.time()))} s"
        return text + ")"

    def describe(self) -> dict[str, Any]:
        state = self.state
        return {"name": self.name, **self.config.describe(), "status": state.status.value,
                "since": state.since, "tools": list(state.tools), "restarts": state.restarts,
                "failures": state.failures, "last_error": state.last_error,
                "retry_at": state.retry_at}


class McpServerFailed(AgentError):
    """One attempt to serve a server ended (it did not start, or stopped answering);
    ``str()`` already says why, for its state."""


async def _list_tools(client: Client) -> list[RemoteTool]:
    tools: list[RemoteTool] = []
    cursor: str | None = None
    for _ in range(_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if cursor is None or len(tools) >= MAX_LISTED_TOOLS:
            break
    return tools[:MAX_LISTED_TOOLS]


def describe_error(exc: BaseException) -> str:
    """One line: the innermost useful message of an error (task groups wrap theirs)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, McpServerFailed):
        return str(exc)
    if isinstance(exc, MCPError):
        return f"MCP error {exc.code}: {exc.message}"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
