"""The base of the agent's own exceptions: `AgentError`.

Under it: a tool's failure the model should read (`tools.base.ToolError`), the sandbox that
cannot run or check a call (`tools.sandbox.SandboxUnavailable`,
`tools.sandbox_masks.MaskScanRefused`), an unusable ``mcp.json`` or MCP server
(`tools.mcp_client.config.McpConfigError` and its kinds, `server.McpServerFailed`), a
diagram that cannot be rendered (`diagram.render.DiagramError`), and the control flow of
the tool registry and the text tool-call parser. They are siblings, not `ToolError`s: the
registry shows a `ToolError`'s text to the model as is and reports anything else as an
internal error, and that split stays.

The sandbox's code policy (`tools._sandbox_policy.SandboxViolation`) is the one exception of
the agent that is not here: the sandbox child loads that file by path with the standard
library only, so it cannot import this module.
"""

from __future__ import annotations

from soulflow.errors import SoulFlowError

__all__ = ["AgentError"]


class AgentError(SoulFlowError):
    """The agent, its tools, its sandbox or its diagram renderer refused or failed."""
