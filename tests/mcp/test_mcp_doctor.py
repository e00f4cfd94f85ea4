"""`soulflow doctor`'s mcp check: a bad mcp.json, a program that is not there and a server
that would work, each with its sentence."""

from __future__ import annotations

import json
from pathlib import Path

from soulflow.doctor.mcp import check_mcp
from soulflow.doctor.model import DoctorContext, Status
from tests.mcp.conftest import stdio_entry
from tests.tools.sandbox_support import working_sandbox


async def _check(workspace: Path, data: object | None) -> list[tuple[str, Status, str]]:
    if data is not None:
        text = data if isinstance(data, str) else json.dumps(data)
        (workspace / "mcp.json").write_text(text)
    ctx = DoctorContext.load(workspace, {"SOULFLOW_WORKSPACE": str(workspace)})
    return [(r.name, r.status, r.message) for r in await check_mcp(ctx)]


async def test_no_config_is_a_skip(workspace: Path) -> None:
    assert [s for _, s, _ in await _check(workspace, None)] == [Status.SKIP]


async def test_a_bad_config_fails_with_its_sentence(workspace: Path) -> None:
    [(name, status, message)] = await _check(workspace, {"mcpServers": {"a": {"cmd": "x"}}})
    assert (name, status) == ("mcp", Status.FAIL) and "exactly one" in message


async def test_each_server_is_checked(workspace: Path) -> None:
    working_sandbox()
    results = await _check(workspace, {"mcpServers": {
        "good": stdio_entry(env={"T": "{{secret:TOKEN}}"}),
        "gone": {"command": "no-such-mcp-server-program"},
        "web": {"url": "http://127.0.0.1:9/mcp"}}})
    by_name = {name: (status, message) for name, status, message in results}
    assert by_name["mcp good"][0] is Status.OK
    assert "in the sandbox, no network" in by_name["mcp good"][1]
    assert "uses secret(s) TOKEN" in by_name["mcp good"][1]
    assert by_name["mcp gone"][0] is Status.FAIL and "not on the sandbox's PATH" in \
        by_name["mcp gone"][1]
    assert by_name["mcp web"] == (Status.OK, "streamable HTTP http://127.0.0.1:9/mcp")
