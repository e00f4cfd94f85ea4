"""MCP through a running daemon (`soulflow run`): the operator's mcp.json starts a real SDK
server in the sandbox; the model (scripted) calls its tools - an auto-approved one at once,
another only after approval, a denied one never - a secret in the server's env reaches the
server but no model request, and `/api/state` and `soulflow status` report the server, a
broken mcp.json and a server that cannot start, without the daemon stopping."""

from __future__ import annotations

import json
import uuid

from tests.e2e.harness import Daemon, wait_for
from tests.e2e.tool_runs import require_bwrap, tool_output
from tests.fakes.openai_api import FakeOpenAIThread
from tests.mcp.conftest import install_server, stdio_entry


def _servers(daemon: Daemon) -> dict[str, dict]:  # type: ignore[type-arg]
    return {s["name"]: s for s in daemon.state()["mcp"]["servers"]}


def _running(daemon: Daemon, name: str) -> dict:  # type: ignore[type-arg]
    return wait_for(lambda: (s := _servers(daemon).get(name)) and s["status"] == "running"
                    and s, 60, what=f"MCP server {name} to run")


def _assistant(daemon: Daemon, chat: str) -> list[str]:
    return [m["content"] for m in daemon.replies(chat)]


def test_the_model_calls_mcp_tools_with_approval(make_daemon,
                                                 fake_llm: FakeOpenAIThread) -> None:
    require_bwrap()
    daemon = make_daemon()
    token = f"mcp-token-{uuid.uuid4().hex}"
    stored = daemon.cli("secret", "set", "MCP_TOKEN", input=f"{token}\n".encode())
    assert stored.returncode == 0, stored.stderr
    install_server(daemon.workspace)
    (daemon.workspace / "mcp.json").write_text(json.dumps({"mcpServers": {
        "calc": stdio_entry(autoApprove=["add"], env={"API_TOKEN": "{{secret:MCP_TOKEN}}"}),
        "broken": stdio_entry("--fail-start")}}))
    daemon.start()
    calc = _running(daemon, "calc")
    assert "add" in calc["tools"] and calc["sandboxed"] and not calc["network"]

    # auto-approved: runs at once
    fake_llm.script_tool_call("mcp__calc__add", {"a": 20, "b": 22}, call_id="c-add")
    fake_llm.script_reply("The sum is 42.")
    reply = daemon.wait_reply(daemon.say("add 20 and 22", chat_id="m1"), "m1", timeout=60)
    assert reply["content"] == "The sum is 42."
    assert tool_output(fake_llm.requests, "c-add") == "42"
    offered = [t["function"]["name"] for t in fake_llm.requests[-1].json["tools"]]
    assert "mcp__calc__env" in offered and not any("broken" in n for n in offered)

    # not in autoApprove: asks, runs after "approve"; the secret never reaches the model
    fake_llm.script_tool_call("mcp__calc__env", {"name": "API_TOKEN"}, call_id="c-env")
    fake_llm.script_reply("I read the variable.")
    daemon.say("what is API_TOKEN?", chat_id="m2")
    asked = wait_for(lambda: next((t for t in _assistant(daemon, "m2")
                                   if t.startswith("Approval needed")), None), 60,
                     what="the approval request")
    assert "mcp__calc__env" in asked and "autoApprove" in asked
    daemon.say("approve", chat_id="m2")
    wait_for(lambda: "I read the variable." in _assistant(daemon, "m2"), 60,
             what="the answer after approval")
    output = tool_output(fake_llm.requests, "c-env")
    assert token not in output and output != "<unset>"

    # denied: never runs
    fake_llm.script_tool_call("mcp__calc__write", {"path": "/scratch/denied.txt",
                                                   "text": "no"}, call_id="c-deny")
    fake_llm.script_reply("Left it alone.")
    daemon.say("write a file", chat_id="m3")
    wait_for(lambda: any(t.startswith("Approval needed") for t in _assistant(daemon, "m3")),
             60, what="the second approval request")
    daemon.say("deny", chat_id="m3")
    wait_for(lambda: "Left it alone." in _assistant(daemon, "m3"), 60, what="the answer")
    assert "denied" in tool_output(fake_llm.requests, "c-deny")
    assert not (daemon.workspace / "runtime" / "mcp" / "calc" / "denied.txt").exists()

    assert token not in json.dumps([r.json for r in fake_llm.requests])
    assert token not in daemon.api("GET", "/api/state").text

    # the broken server is reported, the daemon runs on
    broken = wait_for(lambda: (s := _servers(daemon)["broken"])["failures"] >= 1 and s, 60,
                      what="the broken server's failure")
    assert "missing configuration" in broken["last_error"]
    state = daemon.state()
    assert any(p.startswith("MCP server broken is down") for p in state["problems"])
    status = daemon.cli("status").stdout.decode()
    assert "  mcp        calc running (sandboxed stdio)" in status
    assert "  mcp        broken " in status and "missing configuration" in status
    doctor = daemon.cli("doctor", "--json", timeout=120)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["mcp calc"]["status"] == "ok", checks["mcp calc"]
    assert "running in the running daemon" in checks["mcp calc"]["message"]
    assert checks["mcp broken"]["status"] == "FAIL"
    assert "missing configuration" in checks["mcp broken"]["message"]
    assert token not in doctor.stdout.decode()
    assert daemon.alive()


def test_a_bad_mcp_json_is_reported_and_the_daemon_runs(make_daemon,
                                                        fake_llm: FakeOpenAIThread) -> None:
    daemon = make_daemon()
    (daemon.workspace / "mcp.json").write_text('{"mcpServers": {"x": {"comand": "y"}}}')
    daemon.start()
    mcp = daemon.state()["mcp"]
    assert mcp["servers"] == [] and "exactly one" in mcp["error"]
    assert any(p.startswith("mcp.json: ") for p in daemon.state()["problems"])
    assert "mcp.json not used" in daemon.cli("status").stdout.decode()
    fake_llm.script_reply("Still here.")
    assert daemon.wait_reply(daemon.say("hello"))["content"] == "Still here."
