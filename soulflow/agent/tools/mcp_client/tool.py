"""One MCP server tool as the model sees it: ``mcp__<server>__<tool>``, the server's schema.

It goes through `ToolRegistry.execute` like every other tool, so its arguments are checked
against the server's JSON schema, its approval is decided on the arguments as the model wrote
them, its output is masked and redacted and truncated. What is its own:

* **approval**: a call waits for the requester's (or an admin's) approval unless the operator
  listed the tool in the server's ``autoApprove``; the server is third-party code, and a
  tool's name or description is the server's word, not the operator's;
* **secrets in arguments** ask first too (``runs_code``): a secret reference filled into a
  call leaves the daemon for the server's process or host;
* **results**: text blocks as they are, structured content as JSON, binary blocks only named
  (an image is described, never pasted into the context as base64), an ``isError`` result a
  `ToolError` the model reads.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

from mcp_types import (
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from mcp_types import Tool as RemoteTool

from soulflow.agent.tools.base import Params, Tool, ToolContext, ToolError

PREFIX = "mcp"
MAX_DESCRIPTION = 1024
MAX_SCHEMA_CHARS = 16_000  # every tool's schema goes with every model call
CALL_GRACE_S = 5.0  # the registry's backstop, after the call's own timeout
START_WAIT_S = 30.0  # a call made while its server starts waits this long for it
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 64


class ServerCalls(Protocol):
    """What a tool needs of its server: its name and a call."""

    name: str

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallToolResult: ...


def exposed_name(server: str, tool: str) -> str | None:
    """``mcp__<server>__<tool>`` with characters OpenAI refuses replaced by ``_``; None when
    it would be longer than a function name may be."""
    name = f"{PREFIX}__{server}__{_UNSAFE.sub('_', tool)}"
    return name if tool and len(name) <= _MAX_NAME else None


def input_schema(remote: RemoteTool) -> dict[str, Any]:
    """The server's input schema as a function's parameters: an object, always."""
    schema = dict(remote.input_schema or {})
    schema.pop("$schema", None)  # the registry checks it under its own draft
    if schema.get("type") != "object":
        schema = {"properties": {}, **schema}
        schema["type"] = "object"
    schema.setdefault("properties", {})
    return schema


class McpTool(Tool):
    """A tool of one MCP server; built from the server's listing each time it (re)starts."""

    idempotent = False  # unknown: a call interrupted by a crash is reported, not re-run
    runs_code = True  # a secret filled into its arguments leaves the daemon: ask first

    def __init__(self, server: ServerCalls, remote: RemoteTool, name: str, *,
                 auto_approved: bool, timeout_s: float) -> None:
        self.server = server
        self.remote_name = remote.name
        self.name = name
        text = " ".join((remote.description or remote.title or "").split())
        if len(text) > MAX_DESCRIPTION:
            text = text[:MAX_DESCRIPTION] + "..."
        self.description = f"[MCP server '{server.name}', tool '{remote.name}'] {text}".strip()
        self.parameters = input_schema(remote)
        if len(json.dumps(self.parameters)) > MAX_SCHEMA_CHARS:
            raise ValueError(f"its input schema is over {MAX_SCHEMA_CHARS} characters")
        self.auto_approved = auto_approved
        self.timeout_s = timeout_s + START_WAIT_S + CALL_GRACE_S

    def needs_approval(self, params: Params, ctx: ToolContext) -> str | None:
        if self.auto_approved:
            return None
        return (f"MCP tool '{self.remote_name}' of server '{self.server.name}' "
                "(not in its autoApprove list)")

    async def run(self, params: Params, ctx: ToolContext) -> str:
        result = await self.server.call(self.remote_name, params)
        text = render_result(result)
        if result.is_error:
            raise ToolError(f"MCP tool {self.remote_name} failed: {text or 'no details'}")
        return text


def render_result(result: CallToolResult) -> str:
    """The result's content as text for the model."""
    parts = [_block(block) for block in result.content]
    if result.structured_content is not None and not any(
            isinstance(b, TextContent) for b in result.content):
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(p for p in parts if p)


def _block(block: object) -> str:
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ImageContent | AudioContent):
        kind = "image" if isinstance(block, ImageContent) else "audio"
        return f"[{kind} {block.mime_type}, {len(block.data) * 3 // 4} bytes, not shown]"
    if isinstance(block, EmbeddedResource):
        resource = block.resource
        if isinstance(resource, TextResourceContents):
            return f"[resource {resource.uri}]\n{resource.text}"
        return f"[resource {resource.uri}: binary, not shown]"
    if isinstance(block, ResourceLink):
        return f"[resource link {block.uri}{': ' + block.name if block.name else ''}]"
    return f"[{getattr(block, 'type', type(block).__name__)} content, not shown]"
