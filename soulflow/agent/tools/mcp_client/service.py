"""`McpService`: the servers of ``mcp.json``, each a supervised task, their tools in the
registry while they run.

At start it reads ``mcp.json`` (a bad file is logged and reported in ``/api/state`` and
``soulflow doctor``; the daemon runs on without MCP tools) and spawns one loop per server
(``mcp:<name>`` on the daemon's `Supervisor`); nothing waits for a server to come up, so a
slow or broken one delays nothing. Each time a server (re)connects, its listing replaces its
tools in the `ToolRegistry` (``mcp__<server>__<tool>``); they stay registered while it
restarts (a call then says the server is restarting and when it will be tried again), and
are removed when the service stops. Changes to ``mcp.json`` take effect at the next start
of the daemon.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from soulflow.agent.tools.mcp_client.config import (
    CONFIG_FILE,
    McpConfig,
    McpConfigError,
    ServerConfig,
    Transport,
    load_config,
)
from soulflow.agent.tools.mcp_client.secrets import resolve
from soulflow.agent.tools.mcp_client.states import (
    DEFAULT_BACKOFF,
    HOMES_DIR,
    PROBE_INTERVAL_S,
    Backoff,
    ServerStatus,
)
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.agent.tools.sandbox import CodeSandbox
from soulflow.security.redact import Redactor
from soulflow.security.vault import SecretVault
from soulflow.supervisor import Supervisor

if TYPE_CHECKING:  # the SDK's types: imported for real only when a server starts
    from mcp.client._transport import TransportStreams
    from mcp_types import Tool as RemoteTool

    from soulflow.agent.tools.mcp_client.server import McpServer

log = logging.getLogger(__name__)

LOOP_PREFIX = "mcp:"


@dataclass(frozen=True, slots=True)
class McpParts:
    """What the service uses of the daemon."""

    workspace: Path
    runtime_dir: Path
    sandbox: CodeSandbox
    vault: SecretVault | None
    tools: ToolRegistry
    supervisor: Supervisor
    redactor: Redactor | None = None


class McpService:
    def __init__(self, parts: McpParts, *, backoff: Backoff = DEFAULT_BACKOFF,
                 probe_interval_s: float = PROBE_INTERVAL_S) -> None:
        self._parts = parts
        self._backoff = backoff
        self._probe_interval_s = probe_interval_s
        self.servers: dict[str, McpServer] = {}
        self.config = McpConfig()
        self.config_error: str | None = None
        self._registered: dict[str, list[str]] = {}

    async def start(self) -> None:
        """Read ``mcp.json`` and spawn every server's loop; returns at once."""
        try:
            self.config = await asyncio.to_thread(load_config, self._parts.workspace)
        except McpConfigError as exc:
            self.config_error = str(exc)
            log.error("MCP servers not started: %s", exc)
            return
        if not self.config.servers:
            return
        # the MCP SDK (pydantic models, anyio, its HTTP client, OpenTelemetry's API) costs
        # about a second to import: only a daemon with servers to run pays for it
        from soulflow.agent.tools.mcp_client.listing import load_listing
        from soulflow.agent.tools.mcp_client.server import McpServer

        for config in self.config.servers:
            server = McpServer(config, self._connector(config), on_tools=self._listed,
                               backoff=self._backoff, redact=self._redact,
                               probe_interval_s=self._probe_interval_s)
            self.servers[config.name] = server
            # its last listing, so a run resumed (or approved) at boot finds its tools; a
            # call waits for the server to be up
            known = await asyncio.to_thread(load_listing, self._listing_path(config.name))
            if known:
                self._sync_tools(server, known)
            self._parts.supervisor.spawn(LOOP_PREFIX + config.name, server.run)
        log.info("MCP: starting %d server(s): %s", len(self.servers), ", ".join(self.servers))

    async def stop(self) -> None:
        """Stop every server (its process group killed, its HTTP session ended) and take
        its tools out of the registry."""
        await self._parts.supervisor.cancel([LOOP_PREFIX + name for name in self.servers],
                                            timeout=15.0)
        for name in list(self._registered):
            self._unregister(name)

    # -- state -------------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """``/api/state``'s ``mcp`` section: the file's problem, each server's state."""
        return {"config": CONFIG_FILE, "error": self.config_error,
                "disabled": list(self.config.disabled),
                "servers": [server.describe() for server in self.servers.values()]}

    def problems(self) -> list[str]:
        found = [f"{CONFIG_FILE}: {self.config_error}"] if self.config_error else []
        for server in self.servers.values():
            state = server.state
            # down: waiting for its next start, or starting again after failing
            if state.status is not ServerStatus.RUNNING and state.failures:
                found.append(f"MCP server {server.name} is down ({state.failures} failed "
                             f"start(s) in a row): {state.last_error}")
        return found

    # -- parts -------------------------------------------------------------------------------

    def _redact(self, text: str) -> str:
        redactor = self._parts.redactor
        return redactor.redact(text) if redactor is not None else text

    def _learn(self, values: list[str]) -> None:
        if values and self._parts.redactor is not None:
            self._parts.redactor.register(*values)

    def _connector(self, config: ServerConfig) -> Callable[..., Any]:
        from soulflow.agent.tools.mcp_client import launch  # with the SDK: see start()

        parts = self._parts

        async def connect(closed: asyncio.Event) -> tuple[
                AbstractAsyncContextManager[TransportStreams], Callable[[], str]]:
            where = f"MCP server {config.name}"
            if config.transport is Transport.HTTP:
                headers, opened = await asyncio.to_thread(resolve, config.headers,
                                                          parts.vault, where=where)
                self._learn(opened)
                return launch.watched(launch.http_transport(config.url, headers),
                                      closed), lambda: ""
            env, opened = await asyncio.to_thread(resolve, config.env, parts.vault,
                                                  where=where)
            self._learn(opened)
            home = await asyncio.to_thread(launch.server_home, parts.runtime_dir,
                                           config.name)
            cgroup = await asyncio.to_thread(parts.sandbox.cgroups.create,
                                             launch.SERVER_MAX_PIDS + launch.CGROUP_SPARE_PIDS)
            try:
                params = await asyncio.to_thread(partial(
                    launch.sandboxed_params, parts.sandbox, config, parts.workspace, home,
                    env, cgroup=cgroup))
            except BaseException:
                if cgroup is not None:
                    await asyncio.to_thread(cgroup.close)
                raise
            stderr = launch.StderrTail(config.name)
            return launch.watched(launch.stdio_transport(params, stderr, cgroup), closed), \
                lambda: self._redact(stderr.tail())

        return connect

    def _listing_path(self, server: str) -> Path:
        """Beside the server's HOME, not in it: the server may write its HOME."""
        return self._parts.runtime_dir / HOMES_DIR / f"{server}.tools.json"

    async def _listed(self, server: McpServer, remote: list[RemoteTool]) -> None:
        """A fresh listing: into the registry, and kept for the next start."""
        from soulflow.agent.tools.mcp_client.listing import save_listing  # see start()

        self._sync_tools(server, remote)
        try:
            await asyncio.to_thread(save_listing, self._listing_path(server.name), remote)
        except OSError as exc:
            log.warning("MCP server %s: its tools listing was not kept (%s)", server.name, exc)

    def _sync_tools(self, server: McpServer, remote: list[RemoteTool]) -> None:
        """Replace ``server``'s tools in the registry with its latest listing."""
        from soulflow.agent.tools.mcp_client.tool import McpTool, exposed_name  # see start()

        self._unregister(server.name)
        names: list[str] = []
        config = server.config
        for tool in remote:
            name = exposed_name(server.name, tool.name)
            if name is None:
                log.warning("MCP server %s: tool %r skipped: its name is too long",
                            server.name, tool.name[:80])
                continue
            try:
                self._parts.tools.register(McpTool(
                    server, tool, name, auto_approved=tool.name in config.auto_approve,
                    timeout_s=config.timeout_s))
            except ValueError as exc:  # a duplicate after sanitising, an invalid schema
                log.warning("MCP server %s: tool %r skipped: %s", server.name,
                            tool.name[:80], exc)
                continue
            names.append(name)
        self._registered[server.name] = names

    def _unregister(self, server: str) -> None:
        for name in self._registered.pop(server, []):
            self._parts.tools.unregister(name)
