"""Server side of Slack Socket Mode for the fake.

Protocol as slack_sdk's ``SocketModeClient`` expects it: the client gets a one-off
``ws://.../link/?ticket=...`` URL from ``apps.connections.open``, connects, receives
``{"type": "hello"}``, then envelopes ``{"envelope_id", "type": "events_api", "payload"}``
which it acknowledges with ``{"envelope_id": ...}``. Slack may send
``{"type": "disconnect", "reason": ...}`` asking the client to reconnect, and may drop
the connection. Envelopes are queued while no client is connected and flushed to the
next connection (a simplification of Slack's own retry schedule); with
``redeliver_after`` set, unacknowledged envelopes are re-sent with ``retry_attempt``
incremented, like Slack's 3 retries.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

from tests.fakes.slack_objects import APP_ID

MAX_RETRIES = 3


@dataclass
class _Connection:
    """One accepted websocket with its ordered outgoing queue."""

    number: int
    ws: web.WebSocketResponse
    request: web.Request
    outbox: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)


@dataclass
class Ack:
    envelope_id: str
    payload: Any
    time: float


class SocketModeHub:
    """Accepts Socket Mode websockets and delivers/acknowledges envelopes."""

    def __init__(self, on_change: Callable[[], None], redeliver_after: float | None = None):
        self._on_change = on_change
        self.redeliver_after = redeliver_after
        self.tickets: set[str] = set()
        self.connections: list[_Connection] = []
        self.hellos = 0  # connections ever greeted: a reconnect makes this grow
        self.envelopes: list[dict[str, Any]] = []  # every envelope written to a socket
        self.acks: list[Ack] = []
        self.client_messages: list[Any] = []  # everything the client sent, parsed
        self._pending: list[dict[str, Any]] = []
        self._acked: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- tickets & connections -----------------------------------------------------------
    def issue_url(self, base_ws_url: str) -> str:
        ticket = uuid.uuid4().hex
        self.tickets.add(ticket)
        return f"{base_ws_url}/socket-mode/link/?ticket={ticket}&app_id={APP_ID}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("ticket") not in self.tickets:
            return web.Response(status=401, text="invalid ticket")
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self.hellos += 1
        conn = _Connection(self.hellos, ws, request)
        self.connections.append(conn)
        writer = self._spawn(self._write_loop(conn))
        conn.outbox.put_nowait(self._hello())
        for envelope in self._pending:
            conn.outbox.put_nowait(envelope)
        self._pending.clear()
        self._on_change()
        try:
            async for message in ws:
                if message.type == WSMsgType.TEXT:
                    self._on_client_text(message.data)
        finally:
            self.connections.remove(conn)
            writer.cancel()
            self._requeue(conn)
            self._on_change()
        return ws

    def _hello(self) -> dict[str, Any]:
        return {
            "type": "hello",
            "num_connections": len(self.connections),
            "debug_info": {
                "host": "applink-fake-1",
                "build_number": 1,
                "approximate_connection_time": 18060,
            },
            "connection_info": {"app_id": APP_ID},
        }

    async def _write_loop(self, conn: _Connection) -> None:
        while True:
            message = await conn.outbox.get()
            try:
                await conn.ws.send_str(json.dumps(message))
            except ConnectionError:
                conn.outbox.put_nowait(message)
                return
            if "envelope_id" in message:
                self.envelopes.append(message)
                self._schedule_redelivery(message)
            self._on_change()

    def _requeue(self, conn: _Connection) -> None:
        """Envelopes not yet written to a dead socket go to the next connection."""
        while not conn.outbox.empty():
            message = conn.outbox.get_nowait()
            if "envelope_id" in message:
                self.push(message)

    def _on_client_text(self, data: str) -> None:
        try:
            message = json.loads(data)
        except ValueError:
            message = data
        self.client_messages.append(message)
        if isinstance(message, dict) and "envelope_id" in message:
            self._acked.add(message["envelope_id"])
            self.acks.append(Ack(message["envelope_id"], message.get("payload"), time.monotonic()))
        self._on_change()

    # -- delivery ------------------------------------------------------------------------
    def push(self, envelope: dict[str, Any]) -> None:
        """Send to the newest open connection, or queue until a client connects."""
        live = [c for c in self.connections if not c.ws.closed]
        if live:
            live[-1].outbox.put_nowait(envelope)
        else:
            self._pending.append(envelope)
        self._on_change()

    def is_acked(self, envelope_id: str) -> bool:
        return envelope_id in self._acked

    @property
    def pending(self) -> list[dict[str, Any]]:
        return list(self._pending)

    def _schedule_redelivery(self, envelope: dict[str, Any]) -> None:
        if self.redeliver_after is None or envelope.get("retry_attempt", 0) >= MAX_RETRIES:
            return
        self._spawn(self._redeliver(envelope, self.redeliver_after))

    async def _redeliver(self, envelope: dict[str, Any], delay: float) -> None:
        await asyncio.sleep(delay)
        if self.is_acked(envelope["envelope_id"]):
            return
        retry = copy.deepcopy(envelope)
        retry["retry_attempt"] = envelope.get("retry_attempt", 0) + 1
        retry["retry_reason"] = "timeout"
        self.push(retry)

    # -- server-side connection control ---------------------------------------------------
    def send_disconnect(self, reason: str = "refresh_requested") -> int:
        """Ask every connected client to reconnect (Slack does this periodically)."""
        message = {"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-fake-1"}}
        for conn in self.connections:
            conn.outbox.put_nowait(message)
        return len(self.connections)

    async def close_all(self, code: int = WSCloseCode.GOING_AWAY) -> int:
        """Close every socket with a proper close frame."""
        conns = list(self.connections)
        for conn in conns:
            await conn.ws.close(code=code, message=b"server closing")
        return len(conns)

    def drop_all(self) -> int:
        """Abort every socket's TCP connection without a close frame."""
        conns = list(self.connections)
        for conn in conns:
            if conn.request.transport is not None:
                conn.request.transport.abort()
        return len(conns)

    async def shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self.close_all()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
