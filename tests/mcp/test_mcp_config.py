"""mcp.json is checked whole and a bad one is a sentence, never a crash; secret references
open only the vault's global entries; tool names and results as the model gets them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp_types import (
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    TextContent,
    TextResourceContents,
)
from mcp_types import Tool as RemoteTool

from soulflow.agent.tools.bwrap import BwrapDetector
from soulflow.agent.tools.mcp_client.config import McpConfigError, Transport, load_config
from soulflow.agent.tools.mcp_client.secrets import McpSecretError, resolve
from soulflow.agent.tools.mcp_client.states import ServerStatus
from soulflow.agent.tools.mcp_client.tool import exposed_name, input_schema, render_result
from soulflow.agent.tools.sandbox import CodeSandbox
from soulflow.security.vault import chat_scope
from tests.mcp.conftest import McpRig, stdio_entry
from tests.vaults import file_vault
from tests.waiting import until


def _write(workspace: Path, data: object) -> None:
    text = data if isinstance(data, str) else json.dumps(data)
    (workspace / "mcp.json").write_text(text)


def test_no_file_is_no_servers(workspace: Path) -> None:
    assert load_config(workspace).servers == ()


def test_both_shapes_parse(workspace: Path) -> None:
    _write(workspace, {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "srv"], "env": {"K": "{{secret:K}}"},
                  "network": True, "autoApprove": ["read"], "timeoutS": 5},
        "remote": {"url": "https://example.com/mcp", "headers": {"X-Key": "hdr-value-9"}},
        "off": {"command": "x", "disabled": True}}})
    config = load_config(workspace)
    files, remote = config.servers
    assert files.transport is Transport.STDIO and files.network and files.timeout_s == 5
    assert files.auto_approve == {"read"} and files.args == ("-y", "srv")
    assert remote.transport is Transport.HTTP and remote.headers == {"X-Key": "hdr-value-9"}
    assert config.disabled == ("off",)
    assert "hdr-value-9" not in json.dumps(remote.describe())  # header values are never shown


@pytest.mark.parametrize(("data", "words"), [
    ("{not json", "not valid JSON"),
    ({"servers": {}}, '"mcpServers"'),
    ({"mcpServers": {"a b": {"command": "x"}}}, "server name"),
    ({"mcpServers": {"a": {"command": "x", "url": "http://h"}}}, "exactly one"),
    ({"mcpServers": {"a": {}}}, "exactly one"),
    ({"mcpServers": {"a": {"command": "x", "netwrok": True}}}, "unknown key(s) netwrok"),
    ({"mcpServers": {"a": {"command": "x", "network": "yes"}}}, '"network"'),
    ({"mcpServers": {"a": {"command": "x", "args": "-y"}}}, '"args"'),
    ({"mcpServers": {"a": {"command": "x", "env": {"A": 1}}}}, '"env.A"'),
    ({"mcpServers": {"a": {"url": "ftp://h"}}}, '"url"'),
    ({"mcpServers": {"a": {"url": "http://h", "headers": {"X": "a\r\nB: c"}}}}, "headers.X"),
    ({"mcpServers": {"a": {"command": "x", "timeoutS": 0}}}, '"timeoutS"'),
    ({"mcpServers": {"a": {"command": "x", "autoApprove": "all"}}}, '"autoApprove"'),
])
def test_a_bad_file_says_where(workspace: Path, data: object, words: str) -> None:
    _write(workspace, data)
    with pytest.raises(McpConfigError) as caught:
        load_config(workspace)
    assert "mcp.json" in str(caught.value) and words in str(caught.value)


def test_a_symlinked_config_is_refused(workspace: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "planted.json"
    elsewhere.write_text(json.dumps({"mcpServers": {"a": {"command": "x"}}}))
    (workspace / "mcp.json").symlink_to(elsewhere)
    with pytest.raises(McpConfigError, match="cannot be read"):
        load_config(workspace)


async def test_a_bad_file_never_stops_the_service(workspace: Path) -> None:
    rig = McpRig(workspace, CodeSandbox(), file_vault(workspace / "runtime" / "security"), "")
    service = await rig.start('{"mcpServers": {"a": {"command": 1}}}')
    assert service.servers == {} and "must be a program" in (service.config_error or "")
    assert service.problems() == [f"mcp.json: {service.config_error}"]
    assert service.describe()["error"] == service.config_error
    await rig.close()


async def test_without_bubblewrap_a_stdio_server_does_not_start(workspace: Path) -> None:
    sandbox = CodeSandbox(detector=BwrapDetector(bwrap=str(workspace / "no-bwrap")))
    rig = McpRig(workspace, sandbox, file_vault(workspace / "runtime" / "security"), "")
    await rig.start({"t": stdio_entry()})
    server = rig.server("t")
    await until(lambda: server.state.failures >= 2, 10)
    assert server.state.status is ServerStatus.RESTARTING
    assert "only inside the bubblewrap sandbox" in server.state.last_error
    assert rig.tools.names() == []  # nothing ran unconfined
    await rig.close()


def test_secrets_come_from_global_entries_only(tmp_path: Path) -> None:
    vault = file_vault(tmp_path / "security")
    vault.set("GLOBAL_TOKEN", "global-value-123")
    vault.set("CHAT_TOKEN", "chat-value-456", scope=chat_scope("local", "c1"))
    values, opened = resolve({"A": "Bearer {{secret:GLOBAL_TOKEN}}", "B": "plain"}, vault,
                             where="MCP server t")
    assert values == {"A": "Bearer global-value-123", "B": "plain"}
    assert opened == ["global-value-123"]
    with pytest.raises(McpSecretError, match="scoped to one chat") as scoped:
        resolve({"A": "{{secret:CHAT_TOKEN}}"}, vault, where="MCP server t")
    with pytest.raises(McpSecretError, match="not in the vault") as missing:
        resolve({"A": "{{secret:NOPE}}"}, vault, where="MCP server t")
    assert "chat-value" not in str(scoped.value) + str(missing.value)


def test_tool_names_and_schemas() -> None:
    assert exposed_name("srv", "read.file") == "mcp__srv__read_file"
    assert exposed_name("srv", "x" * 60) is None
    remote = RemoteTool(name="t", input_schema={"$schema": "http://json-schema.org/draft-07/"
                                                "schema#", "properties": {"a": {}}})
    assert input_schema(remote) == {"type": "object", "properties": {"a": {}}}


def test_results_are_text_and_binary_is_only_named() -> None:
    result = CallToolResult(content=[
        TextContent(text="hello"), ImageContent(data="QUJD" * 100, mime_type="image/png"),
        EmbeddedResource(resource=TextResourceContents(uri="file:///a", text="body"))])
    text = render_result(result)
    assert text.startswith("hello\n[image image/png, 300 bytes, not shown]")
    assert "QUJD" not in text and "[resource file:///a]\nbody" in text
    structured = CallToolResult(content=[], structured_content={"n": 1})
    assert render_result(structured) == '{"n": 1}'


def test_a_huge_schema_is_refused() -> None:
    from soulflow.agent.tools.mcp_client.tool import McpTool

    class Server:
        name = "s"

        async def call(self, tool: str, arguments: dict) -> CallToolResult:  # type: ignore[type-arg]
            raise AssertionError

    remote = RemoteTool(name="big", input_schema={
        "type": "object", "properties": {f"p{i}": {"description": "x" * 100}
                                         for i in range(200)}})
    with pytest.raises(ValueError, match="input schema is over"):
        McpTool(Server(), remote, "mcp__s__big", auto_approved=False, timeout_s=5)
