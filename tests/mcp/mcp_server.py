"""A real MCP server written with the SDK (`MCPServer`, formerly FastMCP) for the MCP tests.

Run over stdio (``python mcp_server.py stdio [--starts FILE] [--die-after-start N]``) inside
the daemon's sandbox, or built in-process with `build()` and served over streamable HTTP.
Its tools are what an attacker's server would try from inside the sandbox: read files,
read its environment, open connections; plus a slow tool and one that kills the process.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

WIRE = [1]  # the protocol's stdout, kept before the SDK diverts fd 1 to stderr


def build(name: str = "test") -> MCPServer:
    server = MCPServer(name)

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep, then answer."""
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    def env(name: str) -> str:
        """One variable of the server's environment."""
        return os.environ.get(name, "<unset>")

    @server.tool()
    def environ() -> str:
        """The names of every variable of the server's environment."""
        return " ".join(sorted(os.environ))

    @server.tool()
    def read(path: str) -> str:
        """Read a file, or say why not."""
        try:
            return Path(path).read_bytes().decode("utf-8", "replace") or "<empty>"
        except OSError as exc:
            return f"refused: {type(exc).__name__}: {exc.strerror}"

    @server.tool()
    def write(path: str, text: str) -> str:
        """Write a file, or say why not."""
        try:
            Path(path).write_text(text)
            return "written"
        except OSError as exc:
            return f"refused: {type(exc).__name__}: {exc.strerror}"

    @server.tool()
    def connect(host: str, port: int) -> str:
        """Open a TCP connection, or say why not."""
        try:
            with socket.create_connection((host, port), timeout=3):
                return "connected"
        except OSError as exc:
            return f"refused: {type(exc).__name__}: {exc}"

    @server.tool()
    def fail(message: str) -> str:
        """Fail with a message for the caller."""
        raise ToolError(message)

    @server.tool()
    def flood(megabytes: int) -> str:
        """Write one endless line to stdout, past the client's protocol."""
        chunk = b"x" * (1024 * 1024)
        for _ in range(megabytes):
            os.write(WIRE[0], chunk)
        return "flooded"

    @server.tool()
    def crash() -> str:
        """Kill this process."""
        sys.stderr.write("crashing on purpose\n")
        sys.stderr.flush()
        os._exit(3)

    return server


def main(argv: list[str]) -> None:
    starts = argv[argv.index("--starts") + 1] if "--starts" in argv else None
    if starts is not None:  # count the starts, in the server's writable HOME
        path = Path(os.environ["HOME"]) / starts
        count = int(path.read_text()) + 1 if path.exists() else 1
        path.write_text(str(count))
    if "--fail-start" in argv:
        sys.stderr.write("cannot start: missing configuration\n")
        sys.exit(2)
    WIRE[0] = os.dup(1)
    build().run("stdio")


if __name__ == "__main__":
    main(sys.argv[1:])
