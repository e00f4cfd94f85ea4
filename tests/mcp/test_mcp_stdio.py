"""Real MCP servers (the SDK's `MCPServer`) over stdio, inside the bubblewrap sandbox: their
tools in the registry, approval unless auto-approved, what a hostile server can reach from
inside (nothing secret, no network unless allowed), crash and restart with backoff, a slow
tool timing out without holding another chat, and secrets that reach the server but never
the model."""

from __future__ import annotations

import asyncio
import json
import os
import uuid

import pytest

from soulflow.agent.tools.files import EditFileTool, WriteFileTool
from soulflow.agent.tools.mcp_client.states import ServerStatus
from soulflow.agent.tools.shell import ExecTool
from soulflow.security.vault import chat_scope
from soulflow.supervisor import Supervisor
from tests.mcp.conftest import McpRig, stdio_entry
from tests.tools.listener import Listener
from tests.tools.sandbox_support import processes_with, wait_none_with
from tests.waiting import until


async def test_tools_are_listed_with_their_schema_and_called(rig: McpRig) -> None:
    await rig.start({"t": stdio_entry(autoApprove=["add"])})
    await rig.running("t")
    assert "mcp__t__add" in rig.tools.names() and "mcp__t__crash" in rig.tools.names()
    schema = next(s for s in rig.tools.schemas() if s["function"]["name"] == "mcp__t__add")
    params = schema["function"]["parameters"]
    assert params["type"] == "object" and set(params["properties"]) == {"a", "b"}
    assert "Add two integers." in schema["function"]["description"]
    result = await rig.call("mcp__t__add", {"a": 2, "b": 40}, approved=False)
    assert result.status == "ok" and result.output == "42"
    bad = await rig.call("mcp__t__add", {"a": "two"}, approved=False)  # the server's schema
    assert bad.status == "error" and "invalid arguments" in bad.output
    failed = await rig.call("mcp__t__fail", {"message": "no such row"})
    assert failed.status == "error" and "no such row" in failed.output


async def test_a_tool_not_auto_approved_waits_for_approval(rig: McpRig) -> None:
    await rig.start({"t": stdio_entry(autoApprove=["add"])})
    await rig.running("t")
    asked = await rig.call("mcp__t__echo", {"text": "hi"}, approved=False)
    assert asked.status == "approval_required" and not asked.admins_only  # the requester
    assert asked.reason == "MCP tool 'echo' of server 't' (not in its autoApprove list)"
    approved = await rig.call("mcp__t__echo", {"text": "hi"}, approved=True)
    assert approved.output == "hi"
    # a secret in the arguments of even an auto-approved tool asks first: it would leave
    rig.vault.set("SOME_KEY", "value-of-some-key")
    secret = await rig.call("mcp__t__add", {"a": 1, "b": 1}, approved=False)
    assert secret.status == "ok"
    leaked = await rig.call("mcp__t__echo", {"text": "{{secret:SOME_KEY}}"}, approved=False)
    assert leaked.status == "approval_required"


async def test_a_hostile_server_reaches_nothing_secret(rig: McpRig, listener: Listener,
                                                       monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    daemon_secret = f"daemon-env-{uuid.uuid4().hex}"
    monkeypatch.setenv("SLACK_BOT_TOKEN", daemon_secret)
    port = await listener.start()
    await rig.start({"t": stdio_entry()})
    await rig.running("t")
    ws = rig.workspace
    key = (ws / "runtime" / "security" / "master.key").read_bytes()
    outputs = []
    for path in (ws / ".env", ws / "runtime" / "security" / "master.key",
                 ws / "runtime" / "security" / "secrets.json", f"/proc/{os.getpid()}/environ"):
        result = await rig.call("mcp__t__read", {"path": str(path)})
        outputs.append(result.output)
        assert result.output.startswith("refused") or result.output == "<empty>", result
    environ = (await rig.call("mcp__t__environ", {})).output
    assert "SLACK_BOT_TOKEN" not in environ and environ.split() == sorted(
        ["HOME", "LANG", "LOGNAME", "PATH", "PWD", "SHELL", "TERM", "TMPDIR", "USER"])
    for target in (ws / "mcp.json", ws / "planted.txt"):  # the workspace is read-only
        wrote = await rig.call("mcp__t__write", {"path": str(target), "text": "{}"})
        assert wrote.output.startswith("refused"), wrote
    assert json.loads((ws / "mcp.json").read_text())["mcpServers"]["t"]
    home = await rig.call("mcp__t__write", {"path": "/scratch/cache.txt", "text": "ok"})
    assert home.output == "written"  # its own HOME is writable
    net = await rig.call("mcp__t__connect", {"host": "127.0.0.1", "port": port})
    assert net.output.startswith("refused") and listener.connections == 0
    seen = "\n".join(outputs) + environ
    assert rig.canary not in seen and daemon_secret not in seen
    assert key.hex() not in seen


async def test_network_only_when_the_operator_allows_it(rig: McpRig,
                                                        listener: Listener) -> None:
    port = await listener.start()
    await rig.start({"t": stdio_entry(network=True)})
    await rig.running("t")
    net = await rig.call("mcp__t__connect", {"host": "127.0.0.1", "port": port})
    assert net.output == "connected"
    await until(lambda: listener.connections == 1)


async def test_a_crash_is_restarted_with_backoff_and_reported(rig: McpRig) -> None:
    await rig.start({"t": stdio_entry("--starts", "starts.txt"),
                     "other": stdio_entry()})
    server = await rig.running("t")
    await rig.running("other")
    crashed = await rig.call("mcp__t__crash", {})
    assert crashed.status == "error" and "stopped during the call" in crashed.output
    await until(lambda: server.state.restarts == 1, 10)
    assert "crashing on purpose" in server.state.last_error  # its stderr says why
    await rig.running("t")
    assert (await rig.call("mcp__t__add", {"a": 1, "b": 2})).output == "3"
    home = rig.workspace / "runtime" / "mcp" / "t"
    assert (home / "starts.txt").read_text() == "2"  # started again, in the same HOME
    other = rig.server("other")
    assert other.state.restarts == 0 and other.state.status is ServerStatus.RUNNING


async def test_a_server_that_cannot_start_backs_off_and_says_why(rig: McpRig) -> None:
    service = await rig.start({"broken": stdio_entry("--fail-start"), "ok": stdio_entry()})
    await rig.running("ok")
    broken = rig.server("broken")
    await until(lambda: broken.state.failures >= 4, 20)
    assert broken.state.status in {ServerStatus.RESTARTING, ServerStatus.STARTING}
    assert "cannot start: missing configuration" in broken.state.last_error
    await until(lambda: broken.state.status is ServerStatus.RESTARTING, 10)
    problem = service.problems()
    assert len(problem) == 1 and problem[0].startswith("MCP server broken is down")
    # the delays grow: the next start is further away than the first backoff
    assert broken.state.retry_at is not None
    assert (await rig.call("mcp__ok__add", {"a": 1, "b": 1})).output == "2"
    names = rig.tools.names()
    assert not any(n.startswith("mcp__broken__") for n in names)


async def test_a_slow_tool_times_out_without_holding_another_chat(rig: McpRig) -> None:
    await rig.start({"t": stdio_entry(timeoutS=2)})
    await rig.running("t")
    slow = asyncio.create_task(rig.call("mcp__t__slow", {"seconds": 60}, chat="c1"))
    fast = await rig.call("mcp__t__echo", {"text": "quick"}, chat="c2")
    assert fast.output == "quick" and not slow.done()
    timed_out = await asyncio.wait_for(slow, 30)
    assert timed_out.status == "error" and "timed out after 2 s" in timed_out.output
    assert (await rig.call("mcp__t__echo", {"text": "still up"})).output == "still up"


async def test_secrets_reach_the_server_never_the_model(rig: McpRig) -> None:
    token = f"tok-{uuid.uuid4().hex}"
    rig.vault.set("MCP_TOKEN", token)
    await rig.start({"t": stdio_entry(env={"API_TOKEN": "{{secret:MCP_TOKEN}}",
                                           "PLAIN": "visible"})})
    await rig.running("t")
    result = await rig.call("mcp__t__env", {"name": "API_TOKEN"})
    assert result.status == "ok" and token not in result.output
    assert "{{secret:" in result.output or "[REDACTED]" in result.output
    assert (await rig.call("mcp__t__env", {"name": "PLAIN"})).output == "visible"
    assert token not in json.dumps(rig.tools.schemas())
    assert token not in json.dumps(rig.service.describe())  # type: ignore[union-attr]
    assert rig.redactor.redact(f"log line {token}") != f"log line {token}"


async def test_a_chat_scoped_secret_is_not_the_servers(rig: McpRig) -> None:
    rig.vault.set("MCP_TOKEN", "chat-only-value", scope=chat_scope("local", "c1"))
    await rig.start({"t": stdio_entry(env={"API_TOKEN": "{{secret:MCP_TOKEN}}"})})
    server = rig.server("t")
    await until(lambda: server.state.failures >= 1, 10)
    assert "scoped to one chat" in server.state.last_error
    assert "chat-only-value" not in server.state.last_error


async def test_stopping_leaves_no_server_process(rig: McpRig) -> None:
    marker = f"mcp-marker-{uuid.uuid4().hex}"
    await rig.start({"t": stdio_entry("--marker", marker)})
    await rig.running("t")
    assert processes_with(marker)  # bwrap's command line carries it
    parent = rig.sandbox.cgroups.parent  # where the host has a pids cgroup, it is in one
    ours = f"soulflow-sandbox-{os.getpid()}-*"
    if parent is not None:
        [group] = parent.glob(ours)
        assert (group / "pids.max").read_text().strip() == "260"
    slow = asyncio.create_task(rig.call("mcp__t__slow", {"seconds": 60}))
    await rig.close()
    assert await wait_none_with(marker) == []
    result = await asyncio.wait_for(slow, 10)
    assert result.status == "error"
    assert rig.tools.names() == []
    if parent is not None:
        assert list(parent.glob(ours)) == []


async def test_no_tool_writes_mcp_json_without_an_admin(rig: McpRig) -> None:
    """Whoever writes mcp.json chooses what the daemon runs: the file tools ask an admin,
    and exec (the sandbox) cannot write it at all."""
    rig.tools.register(WriteFileTool(rig.sandbox.quotas))
    rig.tools.register(EditFileTool(rig.sandbox.quotas))
    rig.tools.register(ExecTool(rig.sandbox))
    await rig.start({})
    before = (rig.workspace / "mcp.json").read_text()
    planted = json.dumps({"mcpServers": {"evil": {"command": "/bin/sh"}}})
    for name, params in (("write_file", {"path": "mcp.json", "content": planted}),
                         ("write_file", {"path": "./MCP.json", "content": planted}),
                         ("edit_file", {"path": "mcp.json", "old_text": "{",
                                        "new_text": "{ "})):
        asked = await rig.call(name, params, approved=False)
        assert asked.status == "approval_required" and asked.admins_only, asked
    asked = await rig.call("write_file", {"path": "mcp.json", "content": planted},
                           approved=False)
    assert "mcp.json, which chooses the programs" in (asked.reason or "")
    ran = await rig.call("exec", {"command": f"echo '{planted}' > mcp.json; "
                                             "cp /dev/null mcp.json; echo done"},
                         approved=False)
    assert "Read-only file system" in ran.output and "done" in ran.output
    assert (rig.workspace / "mcp.json").read_text() == before


async def test_an_endless_line_stops_the_server_not_the_daemon(rig: McpRig) -> None:
    await rig.start({"t": stdio_entry()})
    server = await rig.running("t")
    flooded = await rig.call("mcp__t__flood", {"megabytes": 40})
    assert flooded.status == "error" and "stopped during the call" in flooded.output
    await until(lambda: server.state.restarts == 1, 20)
    await rig.running("t")
    assert (await rig.call("mcp__t__echo", {"text": "back"})).output == "back"


async def test_after_a_restart_its_tools_are_there_before_it_is(rig: McpRig) -> None:
    """A run resumed at boot (or an MCP call approved before the restart) finds its tool
    from the last listing; the call waits for the server to come up."""
    await rig.start({"t": stdio_entry()})
    await rig.running("t")
    await rig.close()
    assert rig.tools.names() == []
    listing = rig.workspace / "runtime" / "mcp" / "t.tools.json"
    assert "echo" in listing.read_text() and listing.stat().st_mode & 0o777 == 0o600
    rig.supervisor = Supervisor()
    await rig.start({"t": stdio_entry()})
    assert rig.server("t").state.status is ServerStatus.STARTING
    assert "mcp__t__echo" in rig.tools.names()
    result = await rig.call("mcp__t__echo", {"text": "resumed"})
    assert result.output == "resumed"
