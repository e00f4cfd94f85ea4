"""A real MCP server (the SDK's `MCPServer`) over streamable HTTP on loopback: its tools
listed and called, its headers' secrets filled from the vault and never shown to the model,
a wrong token refused and reported, and a server that goes away restarted."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn

from soulflow.agent.tools.mcp_client.states import ServerStatus
from tests.mcp.conftest import McpRig
from tests.mcp.mcp_server import build
from tests.waiting import until


@dataclass
class HttpServer:
    """The test server behind an ASGI wrapper that wants ``Authorization: Bearer <token>``
    and keeps every Authorization header it was sent."""

    token: str
    seen: list[str] = field(default_factory=list)
    server: uvicorn.Server | None = None
    task: asyncio.Task[None] | None = None

    async def start(self, port: int = 0) -> str:
        mcp_server = build("http-test")
        seen = self.seen

        @mcp_server.tool()
        def last_authorization() -> str:
            """The Authorization header of the last request (what a hostile server does)."""
            return seen[-1] if seen else "<none>"

        app = mcp_server.streamable_http_app()

        async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                headers = dict(scope["headers"])
                value = headers.get(b"authorization", b"").decode()
                seen.append(value)
                if value != f"Bearer {self.token}":
                    await send({"type": "http.response.start", "status": 401,
                                "headers": [(b"content-type", b"text/plain")]})
                    await send({"type": "http.response.body", "body": b"bad token"})
                    return
            await app(scope, receive, send)

        config = uvicorn.Config(guarded, host="127.0.0.1", port=port, log_level="warning",
                                lifespan="on")
        self.server = uvicorn.Server(config)
        self.task = asyncio.create_task(self.server.serve())
        await until(lambda: self.server is not None and self.server.started, 20)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/mcp"

    async def stop(self) -> None:
        if self.server is not None and self.task is not None:
            self.server.should_exit = True
            self.server.force_exit = True  # open streams end now, as when it dies
            await asyncio.wait_for(self.task, 20)
            self.server = self.task = None


@pytest.fixture
async def http_server(rig: McpRig) -> AsyncIterator[HttpServer]:
    """The server; at the end the clients stop first, then the server."""
    server = HttpServer(token=f"bearer-{uuid.uuid4().hex}")
    yield server
    await rig.close()
    await server.stop()


async def test_tools_over_http_with_a_secret_header(rig: McpRig,
                                                    http_server: HttpServer) -> None:
    url = await http_server.start()
    rig.vault.set("REMOTE_TOKEN", http_server.token)
    await rig.start({"remote": {"url": url,
                                "headers": {"Authorization": "Bearer {{secret:REMOTE_TOKEN}}"},
                                "autoApprove": ["add"]}})
    await rig.running("remote")
    assert "mcp__remote__add" in rig.tools.names()
    assert (await rig.call("mcp__remote__add", {"a": 3, "b": 4}, approved=False)).output == "7"
    asked = await rig.call("mcp__remote__echo", {"text": "x"}, approved=False)
    assert asked.status == "approval_required"
    leak = await rig.call("mcp__remote__last_authorization", {})
    assert leak.status == "ok" and http_server.token not in leak.output
    assert http_server.seen[-1] == f"Bearer {http_server.token}"  # it did reach the server
    everything = json.dumps([rig.tools.schemas(), rig.service.describe()])  # type: ignore[union-attr]
    assert http_server.token not in everything


async def test_a_wrong_token_is_refused_and_reported(rig: McpRig,
                                                     http_server: HttpServer) -> None:
    url = await http_server.start()
    rig.vault.set("REMOTE_TOKEN", "not-the-right-token")
    service = await rig.start({"remote": {
        "url": url, "headers": {"Authorization": "Bearer {{secret:REMOTE_TOKEN}}"}}})
    server = rig.server("remote")
    await until(lambda: server.state.failures >= 2, 20)
    assert server.state.status in {ServerStatus.RESTARTING, ServerStatus.STARTING}
    assert "401" in server.state.last_error or "could not start" in server.state.last_error
    assert "not-the-right-token" not in server.state.last_error
    await until(lambda: bool(service.problems()), 10)
    assert rig.tools.names() == []


async def test_a_slow_http_tool_times_out_and_the_server_stays(rig: McpRig,
                                                               http_server: HttpServer) -> None:
    url = await http_server.start()
    rig.vault.set("REMOTE_TOKEN", http_server.token)
    await rig.start({"remote": {
        "url": url, "timeoutS": 1,
        "headers": {"Authorization": "Bearer {{secret:REMOTE_TOKEN}}"}}})
    await rig.running("remote")
    slow = asyncio.create_task(rig.call("mcp__remote__slow", {"seconds": 30}, chat="c1"))
    assert (await rig.call("mcp__remote__echo", {"text": "fast"}, chat="c2")).output == "fast"
    result = await asyncio.wait_for(slow, 20)
    assert result.status == "error" and "timed out after 1 s" in result.output
    assert rig.server("remote").state.status is ServerStatus.RUNNING


async def test_a_server_that_goes_away_is_noticed_and_reconnected(
        rig: McpRig, http_server: HttpServer) -> None:
    url = await http_server.start()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    rig.vault.set("REMOTE_TOKEN", http_server.token)
    service = await rig.start({"remote": {
        "url": url, "headers": {"Authorization": "Bearer {{secret:REMOTE_TOKEN}}"}}},
        probe_interval_s=0.3)
    server = await rig.running("remote")
    await until(lambda: server.state.probes >= 3, 20)  # a live server stays connected
    assert server.state.restarts == 0
    await http_server.stop()
    await until(lambda: server.state.status is not ServerStatus.RUNNING, 20)
    down = await rig.call("mcp__remote__echo", {"text": "x"})
    assert down.status == "error" and "is not running" in down.output
    await until(lambda: bool(service.problems()), 20)
    await http_server.start(port)
    await rig.running("remote")
    assert (await rig.call("mcp__remote__echo", {"text": "back"})).output == "back"
    assert server.state.restarts >= 1
