"""A loopback TCP proxy that can cut every live connection: a peer vanishing mid-call.

Put between an adapter and a platform fake (point the adapter's API URL at `proxy.url`), it
forwards bytes both ways; `drop_all()` aborts both ends of every connection at once, the way
a NAT timeout or a crashed load balancer does, with requests in flight and keep-alive
connections idle in the client's pool.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field


@dataclass(eq=False)
class _Link:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    pumps: list[asyncio.Task[None]] = field(default_factory=list)


class DroppingProxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.target_port = target_port
        self.host = host
        self.port = 0
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def connections(self) -> int:
        return len(self._links)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.drop_all()  # the pumps see the aborted sockets and their handlers end
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def drop_all(self) -> int:
        """Abort every live connection (both sides); returns how many there were."""
        links = list(self._links)
        for link in links:
            link.client.transport.abort()
            link.upstream.transport.abort()
        return len(links)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            writer.transport.abort()
            self._handlers.discard(handler)
            return
        link = _Link(writer, up_writer)
        self._links.add(link)
        try:
            link.pumps = [asyncio.create_task(_pump(reader, up_writer), name="proxy:up"),
                          asyncio.create_task(_pump(up_reader, writer), name="proxy:down")]
            await asyncio.wait(link.pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in link.pumps:
                pump.cancel()
            await asyncio.gather(*link.pumps, return_exceptions=True)
            for side in (writer, up_writer):
                side.transport.abort()
            self._links.discard(link)
            self._handlers.discard(handler)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
