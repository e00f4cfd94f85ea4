"""The ``mcp`` check: is ``mcp.json`` usable, can each server start here, and - when this
workspace's daemon runs - how each server is doing in it.

A config problem is a FAIL with the file's own sentence; so is a stdio server whose program
cannot be found, or any stdio server where the bubblewrap sandbox does not work (it would
never start: stdio servers run only inside it). With a running daemon, a server it reports
down is a FAIL carrying its last error (what the server wrote on stderr included).
"""

from __future__ import annotations

import asyncio
from typing import Any

from soulflow.agent.tools.bwrap import BwrapDetector
from soulflow.agent.tools.mcp_client.command import McpStartError, resolve_command
from soulflow.agent.tools.mcp_client.config import (
    CONFIG_FILE,
    McpConfigError,
    Transport,
    load_config,
)
from soulflow.agent.tools.mcp_client.secrets import references
from soulflow.doctor.model import CheckResult, DoctorContext, fail, ok, skip

NAME = "mcp"
FIX = "see docs/mcp.md for the format; the daemon runs on without MCP tools meanwhile"


async def check_mcp(ctx: DoctorContext) -> list[CheckResult]:
    try:
        config = await asyncio.to_thread(load_config, ctx.workspace)
    except McpConfigError as exc:
        return [fail(NAME, str(exc), FIX)]
    if not config.servers:
        disabled = f" ({len(config.disabled)} disabled)" if config.disabled else ""
        return [skip(NAME, f"no MCP servers configured in {CONFIG_FILE}{disabled}")]
    live = await asyncio.to_thread(_daemon_servers, ctx)
    sandbox = None
    results: list[CheckResult] = []
    for server in config.servers:
        name = f"mcp {server.name}"
        secrets = references({**server.env, **server.headers})
        uses = f"; uses secret(s) {', '.join(secrets)} (global vault entries)" if secrets \
            else ""
        if server.transport is Transport.STDIO:
            if sandbox is None:
                sandbox = await asyncio.to_thread(BwrapDetector().status)
            if not sandbox.available:
                results.append(fail(name, "stdio servers run only inside the bubblewrap "
                                          "sandbox, which does not work here", sandbox.detail))
                continue
            try:
                program = resolve_command(server.command, ctx.workspace)
            except McpStartError as exc:
                results.append(fail(name, str(exc), f"fix its \"command\" in {CONFIG_FILE}"))
                continue
            what = f"stdio {program} in the sandbox" + \
                (" with network" if server.network else ", no network")
        else:
            what = f"streamable HTTP {server.url}"
        state = live.get(server.name)
        if state is None:
            results.append(ok(name, what + uses))
        elif state.get("status") != "running" and state.get("failures"):
            results.append(fail(name, f"{what}: down in the running daemon after "
                                      f"{state.get('failures', '?')} failed start(s): "
                                      f"{state.get('last_error', '')}"[:600],
                                "see its stderr in the daemon's log; it is retried with "
                                "backoff"))
        else:
            results.append(ok(name, f"{what}: {state.get('status')} in the running daemon "
                                    f"with {len(state.get('tools') or [])} tool(s)" + uses))
    return results


def _daemon_servers(ctx: DoctorContext) -> dict[str, dict[str, Any]]:
    """Each server's state as the running daemon reports it; empty when none runs."""
    if ctx.settings is None:
        return {}
    from soulflow.cli.client import DaemonClient

    try:
        client = DaemonClient.locate(ctx.settings)
        if client is None:
            return {}
        state = client.get("/api/state")
    except Exception:  # no daemon answering: the config checks above still stand
        return {}
    return {s["name"]: s for s in (state.get("mcp") or {}).get("servers") or []}
