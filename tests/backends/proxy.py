"""A TCP proxy that can be cut: what a node cut off from Redis by the network looks like.

`blackhole()` keeps every connection open but forwards nothing and answers nothing (packets
dropped on the floor, the worst case: the client only learns from its own timeouts);
`restore()` forwards again, what was held first (a request that reached Redis after its
client had given up). `delay_s` holds every chunk that long each way: a slow Redis, or a far
one.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class CuttableProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._open = asyncio.Event()
        self._open.set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.delay_s = 0.0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def blackhole(self) -> None:
        self._open.clear()

    def restore(self) -> None:
        self._open.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        pumps = [asyncio.create_task(self._pump(reader, up_writer), name="proxy-up"),
                 asyncio.create_task(self._pump(up_reader, writer), name="proxy-down")]
        self._tasks.update(pumps)
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for pump in pumps:
            pump.cancel()
        for w in (writer, up_writer):
            w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            data = await reader.read(65536)
            if not data:
                return
            await self._open.wait()  # cut: hold everything, forever
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            writer.write(data)
            await writer.drain()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), timeout=2)


class ProxyThread:
    """tests/backends/proxy.py's cuttable TCP proxy on a loop of its own thread (the daemons
    are other processes; the test itself is synchronous)."""

    def __init__(self, target_port: int) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="redis-proxy",
                                        daemon=True)
        self._thread.start()
        self.proxy = CuttableProxy(target_port)
        self._run(self.proxy.start())

    def _run(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)  # type: ignore[arg-type]

    @property
    def url(self) -> str:
        return self.proxy.url

    def blackhole(self) -> None:
        self._loop.call_soon_threadsafe(self.proxy.blackhole)

    def delay(self, seconds: float) -> None:
        self._loop.call_soon_threadsafe(setattr, self.proxy, "delay_s", seconds)

    def close(self) -> None:
        self._run(self.proxy.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
