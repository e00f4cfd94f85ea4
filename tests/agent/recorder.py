"""`Recorder`: a tool that records its input (`calls` shows whether it ran); `risky` makes
every call need approval."""

from __future__ import annotations

from typing import Any

from soulflow.agent.tools.base import Tool, ToolContext


class Recorder(Tool):
    name = "record"
    description = "records its input"
    parameters = {"type": "object", "properties": {"value": {"type": "string"}},
                  "required": ["value"]}
    idempotent = False

    def __init__(self, risky: bool = False) -> None:
        self.calls: list[str] = []
        self.risky = risky

    def needs_approval(self, params: dict[str, Any], ctx: ToolContext) -> str | None:
        return "it records things" if self.risky else None

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> str:
        self.calls.append(params["value"])
        return f"recorded {params['value']}"
