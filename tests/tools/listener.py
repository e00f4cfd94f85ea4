"""A loopback TCP server that only counts who connected: the target sandbox escapes must miss."""

from __future__ import annotations

import asyncio


class Listener:
    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.close()

    async def start(self) -> int:
        """Listen on a free port; returns it."""
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

