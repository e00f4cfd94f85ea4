"""The package surface: the default registry and the services."""

from __future__ import annotations

from typing import Any

import pytest

from soulflow.agent.tools import WebFetchTool, build_default_registry
from soulflow.agent.tools.base import ToolError, ToolServices


def test_missing_service_is_a_clear_tool_error() -> None:
    with pytest.raises(ToolError, match="the message service is not available here"):
        ToolServices().require("send_message")

    async def send(message: Any) -> None:
        return None

    assert ToolServices(send_message=send).require("send_message") is send
    with pytest.raises(ValueError):
        ToolServices().require("teleport")


def test_build_default_registry() -> None:
    registry = build_default_registry(allowed_hosts={"intranet.example"}, max_output_chars=99)
    assert registry.names() == [
        "edit_file", "exec", "list_dir", "python_repl", "read_file", "web_fetch", "write_file",
    ]  # fmt: skip
    assert registry.max_output_chars == 99
    web = registry.get("web_fetch")
    assert isinstance(web, WebFetchTool)
    assert web.policy.allowed_hosts == frozenset({"intranet.example"})
    assert not web.policy.allow_private
    assert build_default_registry(allow_private_fetch=True).get("web_fetch").policy.allow_private
    for schema in registry.schemas():
        assert schema["type"] == "function"
        assert schema["function"]["parameters"]["type"] == "object"
        assert schema["function"]["description"]
