"""Fixtures for the MCP tests: a workspace with secrets worth stealing (a `.env`, the vault
and its key), the daemon's sandbox, and `McpRig`, which writes `mcp.json` and runs the
service as the daemon does (registry, supervisor, redactor, vault)."""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from soulflow.agent.tools.base import ChatRef, ToolContext
from soulflow.agent.tools.mcp_client.server import McpServer
from soulflow.agent.tools.mcp_client.service import McpParts, McpService
from soulflow.agent.tools.mcp_client.states import Backoff, ServerStatus
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.agent.tools.sandbox import CodeSandbox
from soulflow.security.redact import Redactor
from soulflow.security.vault import SecretVault
from soulflow.supervisor import Supervisor
from tests.tools.listener import Listener
from tests.tools.sandbox_support import working_sandbox
from tests.vaults import file_vault
from tests.waiting import until

SERVER_SCRIPT = Path(__file__).resolve().parent / "mcp_server.py"
IN_WORKSPACE = "servers/mcp_server.py"
FAST = Backoff(initial=0.05, maximum=0.4, stable_after=60.0)


def stdio_entry(*extra: str, **options: Any) -> dict[str, Any]:
    """A stdio server entry running the test server (copied into the workspace, where the
    sandbox sees it, by `McpRig.start`) with this interpreter."""
    return {"command": sys.executable, "args": [IN_WORKSPACE, *extra], **options}


def install_server(workspace: Path) -> None:
    target = workspace / IN_WORKSPACE
    target.parent.mkdir(exist_ok=True)
    shutil.copyfile(SERVER_SCRIPT, target)


@dataclass
class McpRig:
    workspace: Path
    sandbox: CodeSandbox
    vault: SecretVault
    canary: str  # in the workspace's .env
    redactor: Redactor = field(default_factory=Redactor)
    tools: ToolRegistry = field(init=False)
    supervisor: Supervisor = field(default_factory=Supervisor)
    service: McpService | None = None

    def __post_init__(self) -> None:
        self.tools = ToolRegistry(redactor=self.redactor)

    async def start(self, servers: dict[str, Any] | str, *, backoff: Backoff = FAST,
                    probe_interval_s: float = 30.0) -> McpService:
        text = servers if isinstance(servers, str) else json.dumps({"mcpServers": servers})
        (self.workspace / "mcp.json").write_text(text)
        install_server(self.workspace)
        self.service = McpService(McpParts(
            workspace=self.workspace, runtime_dir=self.workspace / "runtime",
            sandbox=self.sandbox, vault=self.vault, tools=self.tools,
            supervisor=self.supervisor, redactor=self.redactor), backoff=backoff,
            probe_interval_s=probe_interval_s)
        await self.service.start()
        return self.service

    def server(self, name: str) -> McpServer:
        assert self.service is not None
        return self.service.servers[name]

    async def running(self, name: str, timeout: float = 30.0) -> McpServer:
        server = self.server(name)
        try:
            await until(lambda: server.state.status is ServerStatus.RUNNING, timeout)
        except TimeoutError:
            raise AssertionError(f"{name} did not start: {server.describe()}") from None
        return server

    def ctx(self, *, approved: bool = False, chat: str = "c1") -> ToolContext:
        return ToolContext(self.workspace, ChatRef("local", chat, sender_id="u1"),
                           vault=self.vault, approved=approved)

    async def call(self, tool: str, params: dict[str, Any], *, approved: bool = True,
                   chat: str = "c1") -> Any:
        return await self.tools.execute(tool, params, self.ctx(approved=approved, chat=chat))

    async def close(self) -> None:
        if self.service is not None:
            await self.service.stop()
        await self.supervisor.stop()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
async def rig(workspace: Path) -> AsyncIterator[McpRig]:
    """A sandboxed rig (bubblewrap required: skipped without it, failed under CI=true)."""
    sandbox = working_sandbox()
    canary = f"sk-{uuid.uuid4().hex}"
    (workspace / ".env").write_text(f"OPENAI_API_KEY={canary}\n")
    vault = file_vault(workspace / "runtime" / "security")
    vault.set("WARMUP", "x" * 12)  # creates the key file
    rig = McpRig(workspace, sandbox, vault, canary)
    yield rig
    await rig.close()


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    """A loopback listener counting connections (what a sandboxed server must not reach)."""
    server = Listener()
    yield server
    await server.stop()
