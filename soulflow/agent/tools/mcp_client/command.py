"""Which program a stdio server runs, decided without the MCP SDK (doctor checks it too)."""

from __future__ import annotations

import shutil
from pathlib import Path

from soulflow.agent.tools.mcp_client.config import McpConfigError
from soulflow.agent.tools.sandbox import DEFAULT_PATH


class McpStartError(McpConfigError):
    """A server cannot be started as configured (no sandbox, no such program)."""


def resolve_command(command: str, workspace: Path) -> str:
    """The program's absolute path: a path as given (relative to the workspace), a bare name
    looked up on the sandbox's PATH. The launcher inside ``exec``s it, without a shell."""
    if "/" in command:
        path = Path(command)
        return str(path if path.is_absolute() else workspace.resolve() / path)
    found = shutil.which(command, path=DEFAULT_PATH)
    if found is None:
        raise McpStartError(f"the program {command!r} is not on the sandbox's PATH "
                            f"({DEFAULT_PATH}); give its full path")
    return found
