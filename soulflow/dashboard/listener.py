"""The dashboard's listening socket, with every connection admitted by a `ConnectionGate`.

aiohttp's own server bounds none of this: a connection may take as long as it likes to send
its request head (its keep-alive timer only runs while the handler waits for a *complete*
request, and not at all for a head being trickled after a response), and it accepts as many
connections as the process has descriptors. aiohttp has no hook for either, so:

* `GatedRequestHandler` is aiohttp's `RequestHandler` (the protocol of one connection) that
  asks the gate before it starts, tells it when bytes arrive, when a response is done and
  when the socket stops or starts taking what is written, and leaves the gate when the
  socket goes. Only public methods are overridden (asyncio's `connection_made`,
  `data_received`, `pause_writing`, `resume_writing`, `connection_lost`; aiohttp's
  `finish_response`).
* "a whole request head came in" is the moment aiohttp builds the request: the server's
  `request_factory` (a public attribute, called with the protocol) is wrapped to say so.
* `listen` opens the socket with `loop.create_server` and this protocol, for the runner's
  `Server` (`AppRunner.server`), instead of a `TCPSite` (whose protocol factory is the
  server itself). The runner still owns the connections: `AppRunner.cleanup()` closes them.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field
from typing import Any, cast

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_server import Server

from soulflow.dashboard.connections import Connection, ConnectionGate, address_key
from soulflow.dashboard.errors import DashboardError

#: listen(2) backlog: connections the kernel holds before the daemon accepts them (they cost
#: the daemon no descriptor until then)
BACKLOG = 128
#: descriptors of connections the gate has not counted at a moment of a flood: the event loop
#: accepts up to BACKLOG connections per turn, admits them to the gate two turns later and
#: closes the ones over a cap one turn after that, so up to three batches are in flight
IN_FLIGHT = 3 * BACKLOG


class GatedRequestHandler(RequestHandler):
    """aiohttp's protocol for one connection, admitted and timed by the gate."""

    def __init__(self, manager: Server, *, gate: ConnectionGate, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._gate = gate
        self._tracked: Connection | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        tracked = self._gate.admit(address_key(transport.get_extra_info("peername")),
                                   cast(asyncio.Transport, transport).abort)
        if tracked is None:
            transport.close()  # over a cap with every connection busy: nothing is read
            return
        self._tracked = tracked
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._tracked is not None:
            self._tracked.bytes_arrived()
        super().data_received(data)

    def head_received(self) -> None:
        """aiohttp is about to build a request from a complete head."""
        if self._tracked is not None:
            self._tracked.head_received()

    async def finish_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().finish_response(*args, **kwargs)
        finally:
            if self._tracked is not None and self._tracked.open:
                self._tracked.await_head(first=False)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._tracked is not None:
            self._tracked.write_stalled()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._tracked is not None:
            self._tracked.write_resumed()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._tracked is None:
            return  # refused: aiohttp never saw this connection
        self._tracked.released()
        super().connection_lost(exc)


def _announcing_heads(factory: Any) -> Any:
    """The server's request factory, first telling the connection its head is complete."""
    def build(message: Any, payload: Any, protocol: RequestHandler, *rest: Any) -> Any:
        if isinstance(protocol, GatedRequestHandler):
            protocol.head_received()
        return factory(message, payload, protocol, *rest)
    return build


async def listen(runner: web.AppRunner, host: str, port: int,
                 gate: ConnectionGate) -> asyncio.Server:
    """Listen on `host:port` for the runner's app (after `runner.setup()`); the caller closes
    the returned server before `runner.cleanup()`."""
    server = runner.server
    if server is None:
        raise RuntimeError("call runner.setup() before listen()")
    server.request_factory = _announcing_heads(server.request_factory)
    loop = asyncio.get_running_loop()
    idle = gate.limits.idle_timeout_s

    def protocol() -> GatedRequestHandler:
        # aiohttp's keep-alive timer is the same bound as the gate's (its own close, which
        # flushes; the gate aborts)
        return GatedRequestHandler(server, gate=gate, loop=loop, access_log=None,
                                   keepalive_timeout=idle)

    return await loop.create_server(protocol, host, port, backlog=BACKLOG)


@dataclass
class PortReservation:
    """The dashboard's address, bound (not listening) before the daemon creates anything.

    `soulflow run` with its port taken must fail before it makes the workspace, its
    runtime/ files or its lock: so the port is bound first, the way the listener will bind
    it (every address `host` resolves to, SO_REUSEADDR), and held while the runtime is built.
    `release()` frees it just before `listen` binds for real, in the same process a moment
    later; a program that takes the port in that moment still gets the same error then."""

    host: str
    port: int
    sockets: list[socket.socket] = field(default_factory=list)

    @classmethod
    def take(cls, host: str, port: int) -> PortReservation:
        reservation = cls(host, port)
        try:
            infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
            for family, kind, proto, _, address in dict.fromkeys(infos):
                try:
                    sock = socket.socket(family, kind, proto)
                except OSError:  # a family this host lacks: skipped, as the listener does
                    continue
                reservation.sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
        except OSError as exc:
            reservation.release()
            raise cannot_listen(host, port, exc) from None
        return reservation

    def release(self) -> None:
        for sock in self.sockets:
            sock.close()
        self.sockets.clear()


def cannot_listen(host: str, port: int, exc: OSError) -> DashboardError:
    return DashboardError(
        f"cannot listen on {host}:{port} ({exc.strerror or exc}); set DASHBOARD_PORT to a "
        "free port or stop the program using it")
