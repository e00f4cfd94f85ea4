"""Gateway (websocket) half of the loopback fake Discord.

Implements the v10 gateway as discord.py drives it: HELLO, IDENTIFY -> READY +
GUILD_CREATE, heartbeats, RESUME with replay by sequence number, server-sent
RECONNECT / INVALID_SESSION, abrupt drops and Discord's 4xxx close codes.
Frames go out zlib-stream compressed (one ``compressobj`` per connection, each
frame ending in a ``Z_SYNC_FLUSH``) when the client asks for
``compress=zlib-stream`` -- discord.py always does unless ``zstandard`` is
importable -- otherwise as plain JSON text frames.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from .discord_objects import (
    JSON,
    PRIVILEGED_INTENTS,
    FakeChannel,
    Intent,
    World,
    redact_for_intents,
)
from .loopback_base import encode_json

HELLO, HEARTBEAT, IDENTIFY, PRESENCE, VOICE_STATE = 10, 1, 2, 3, 4
RESUME, RECONNECT, REQUEST_MEMBERS, INVALID_SESSION, HEARTBEAT_ACK = 6, 7, 8, 9, 11

# Discord's documented gateway close codes.
CLOSE_UNKNOWN_OPCODE = 4001
CLOSE_DECODE_ERROR = 4002
CLOSE_NOT_AUTHENTICATED = 4003
CLOSE_AUTH_FAILED = 4004
CLOSE_ALREADY_AUTHENTICATED = 4005
CLOSE_INVALID_API_VERSION = 4012
CLOSE_INVALID_INTENTS = 4013
CLOSE_DISALLOWED_INTENTS = 4014

EventShaper = Callable[[JSON, int], JSON]


@dataclass
class ConnectionInfo:
    """What a client asked for when it opened the websocket."""

    path: str
    query: dict[str, str]
    compress: str | None


@dataclass
class _Close:
    code: int
    reason: str = ""


class GatewayConnection:
    """One websocket; a single writer task keeps frames ordered and the zlib stream intact."""

    def __init__(self, ws: web.WebSocketResponse, transport: asyncio.BaseTransport | None,
                 info: ConnectionInfo) -> None:
        self.ws = ws
        self.transport = transport
        self.info = info
        self.session: GatewaySession | None = None
        self.outbox: asyncio.Queue[JSON | _Close] = asyncio.Queue()
        self._zlib = zlib.compressobj() if info.compress == "zlib-stream" else None
        self.closing = False

    def send(self, frame: JSON) -> None:
        if not self.closing:
            self.outbox.put_nowait(frame)

    def close(self, code: int, reason: str = "") -> None:
        """Close after already-queued frames are flushed (that is how Discord orders it)."""
        if not self.closing:
            self.closing = True
            self.outbox.put_nowait(_Close(code, reason))

    def abort(self) -> None:
        """Kill the TCP connection without a close frame, like a network failure."""
        self.closing = True
        if self.transport is not None:
            self.transport.abort()

    async def run_writer(self) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            while True:
                item = await self.outbox.get()
                if isinstance(item, _Close):
                    await self.ws.close(code=item.code, message=item.reason.encode())
                    return
                await self._write(item)

    async def _write(self, frame: JSON) -> None:
        if self._zlib is None:
            await self.ws.send_str(json.dumps(frame, separators=(",", ":")))
            return
        data = encode_json(frame)  # "\udce9" in a text goes out as the raw byte 0xE9
        chunk = self._zlib.compress(data) + self._zlib.flush(zlib.Z_SYNC_FLUSH)
        await self.ws.send_bytes(chunk)


@dataclass
class GatewaySession:
    """A resumable session: every dispatch gets the next ``s`` and is kept for replay."""

    id: str
    intents: int
    identify: JSON
    seq: int = 0
    log: list[JSON] = field(default_factory=list)
    connection: GatewayConnection | None = None

    def dispatch(self, event: str, data: Any) -> None:
        self.seq += 1
        frame = {"op": 0, "t": event, "s": self.seq, "d": data}
        self.log.append(frame)
        if self.connection is not None:
            self.connection.send(frame)

    def missed_since(self, seq: int | None) -> list[JSON]:
        return [frame for frame in self.log if frame["s"] > (seq or 0)]


class GatewayServer:
    """Protocol logic; ``FakeDiscord`` mounts :meth:`handle` on ``/gateway``."""

    def __init__(self, world: World, token: str, *, heartbeat_interval_ms: int,
                 allowed_intents: int, on_change: Callable[[], None]) -> None:
        self.world = world
        self.token = token
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.allowed_intents = allowed_intents
        self.on_change = on_change
        self.resume_url = ""
        self.sessions: dict[str, GatewaySession] = {}
        self.connections: list[GatewayConnection] = []
        self.connection_log: list[ConnectionInfo] = []
        self.identifies: list[JSON] = []
        self.resumes: list[JSON] = []
        self.presence_updates: list[JSON] = []
        self.member_requests: list[JSON] = []
        self.heartbeats = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._handlers: dict[int, Callable[[GatewayConnection, Any], None]] = {
            HEARTBEAT: self._on_heartbeat, IDENTIFY: self._on_identify, RESUME: self._on_resume,
            PRESENCE: self._on_presence, VOICE_STATE: lambda conn, d: None,
            REQUEST_MEMBERS: self._on_request_members,
        }

    # -- websocket endpoint -------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        info = ConnectionInfo(request.path, query, query.get("compress"))
        ws = web.WebSocketResponse(max_msg_size=0)
        transport = request.transport
        await ws.prepare(request)
        conn = GatewayConnection(ws, transport, info)
        self.connections.append(conn)
        self._idle.clear()
        self.connection_log.append(info)
        writer = asyncio.create_task(conn.run_writer())
        self._greet(conn)
        try:
            async for msg in ws:
                if msg.type is WSMsgType.TEXT:
                    self._on_text(conn, msg.data)
                else:
                    conn.close(CLOSE_DECODE_ERROR, "Error while decoding payload.")
        finally:
            self._detach(conn)
            self.connections.remove(conn)
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
            if not self.connections:
                self._idle.set()
            self.on_change()
        return ws

    def _greet(self, conn: GatewayConnection) -> None:
        if conn.info.query.get("v", "10") not in ("9", "10"):
            conn.close(CLOSE_INVALID_API_VERSION, "Invalid API version.")
        elif conn.info.query.get("encoding", "json") != "json":
            conn.close(CLOSE_DECODE_ERROR, "The fake only speaks encoding=json.")
        else:
            conn.send({"op": HELLO, "s": None, "t": None,
                       "d": {"heartbeat_interval": self.heartbeat_interval_ms}})

    def _on_text(self, conn: GatewayConnection, text: str) -> None:
        try:
            frame = json.loads(text)
            op = frame["op"]
        except (ValueError, KeyError, TypeError):
            conn.close(CLOSE_DECODE_ERROR, "Error while decoding payload.")
            return
        handler = self._handlers.get(op)
        if handler is None:
            conn.close(CLOSE_UNKNOWN_OPCODE, "Unknown opcode.")
        elif conn.session is None and op not in (HEARTBEAT, IDENTIFY, RESUME):
            conn.close(CLOSE_NOT_AUTHENTICATED, "Not authenticated.")
        else:
            handler(conn, frame.get("d"))
        self.on_change()

    # -- client opcodes -----------------------------------------------------

    def _on_heartbeat(self, conn: GatewayConnection, _seq: Any) -> None:
        self.heartbeats += 1
        conn.send({"op": HEARTBEAT_ACK, "s": None, "t": None, "d": None})

    def _token_ok(self, token: Any) -> bool:
        return isinstance(token, str) and token.removeprefix("Bot ") == self.token

    def _on_identify(self, conn: GatewayConnection, data: Any) -> None:
        data = data if isinstance(data, dict) else {}
        self.identifies.append(data)
        intents = data.get("intents")
        if conn.session is not None:
            conn.close(CLOSE_ALREADY_AUTHENTICATED, "Already authenticated.")
        elif not self._token_ok(data.get("token")):
            conn.close(CLOSE_AUTH_FAILED, "Authentication failed.")
        elif not isinstance(intents, int) or intents < 0 or intents >= 1 << 26:
            conn.close(CLOSE_INVALID_INTENTS, "Invalid intent(s).")
        elif intents & PRIVILEGED_INTENTS & ~self.allowed_intents:
            conn.close(CLOSE_DISALLOWED_INTENTS, "Disallowed intent(s).")
        else:
            self._start_session(conn, data, intents)

    def _start_session(self, conn: GatewayConnection, identify: JSON, intents: int) -> None:
        session = GatewaySession(uuid.uuid4().hex, intents, identify, connection=conn)
        conn.session = session
        self.sessions[session.id] = session
        session.dispatch("READY", self._ready_payload(session))
        if intents & Intent.GUILDS:
            full = Intent.GUILD_MEMBERS | Intent.GUILD_PRESENCES
            members = intents & full == full
            session.dispatch("GUILD_CREATE", self.world.guild_create_payload(all_members=members))

    def _ready_payload(self, session: GatewaySession) -> JSON:
        user = self.world.bot.payload()
        user.update(verified=True, mfa_enabled=False, email=None)
        data: JSON = {
            "v": 10, "user": user, "session_id": session.id, "session_type": "normal",
            "resume_gateway_url": self.resume_url,
            "guilds": [{"id": str(self.world.guild_id), "unavailable": True}],
            "application": {"id": str(self.world.bot.id), "flags": 0},
            "private_channels": [], "relationships": [], "presences": [],
            "guild_join_requests": [], "geo_ordered_rtc_regions": ["loopback"],
            "user_settings": {}, "auth": {},
        }
        if "shard" in session.identify:
            data["shard"] = session.identify["shard"]
        return data

    def _on_resume(self, conn: GatewayConnection, data: Any) -> None:
        data = data if isinstance(data, dict) else {}
        self.resumes.append(data)
        session = self.sessions.get(str(data.get("session_id")))
        if session is None or not self._token_ok(data.get("token")):
            conn.send({"op": INVALID_SESSION, "s": None, "t": None, "d": False})
            return
        if session.connection is not None and session.connection is not conn:
            session.connection.close(4000, "Session resumed elsewhere.")
        conn.session = session
        for frame in session.missed_since(data.get("seq")):
            conn.send(frame)
        session.connection = conn
        session.dispatch("RESUMED", {})

    def _on_presence(self, conn: GatewayConnection, data: Any) -> None:
        self.presence_updates.append(data)

    def _on_request_members(self, conn: GatewayConnection, data: Any) -> None:
        data = data if isinstance(data, dict) else {}
        self.member_requests.append(data)
        assert conn.session is not None
        wanted = {int(u) for u in data.get("user_ids") or []}
        ids = [uid for uid in self.world.member_ids if not wanted or uid in wanted]
        chunk: JSON = {
            "guild_id": str(self.world.guild_id), "chunk_index": 0, "chunk_count": 1,
            "members": [self.world.member_payload(uid) for uid in ids], "not_found": [],
        }
        if data.get("nonce"):
            chunk["nonce"] = data["nonce"]
        conn.session.dispatch("GUILD_MEMBERS_CHUNK", chunk)

    # -- test-side controls --------------------------------------------------

    def dispatch(self, event: str, data: Any, *, intents: int = 0,
                 shape: EventShaper | None = None) -> int:
        """Send to every session subscribed to any of ``intents`` (0 = all); returns count."""
        delivered = 0
        for session in self.sessions.values():
            if intents and not session.intents & intents:
                continue
            session.dispatch(event, shape(data, session.intents) if shape else data)
            delivered += 1
        return delivered

    def dispatch_message(self, event: str, message: JSON, *, in_guild: bool | None = None
                         ) -> int:
        """MESSAGE_* events: gated by (DIRECT|GUILD)_MESSAGES, content by MESSAGE_CONTENT."""
        in_guild = "guild_id" in message if in_guild is None else in_guild
        intent = Intent.GUILD_MESSAGES if in_guild else Intent.DIRECT_MESSAGES
        bot_id = self.world.bot.id
        return self.dispatch(event, message, intents=intent,
                             shape=lambda d, intents: redact_for_intents(d, intents, bot_id))

    def dispatch_reaction(self, message: JSON, user_id: int, emoji: str) -> int:
        """MESSAGE_REACTION_ADD for ``emoji`` ("👍" or custom "name:id")."""
        name, _, emoji_id = emoji.partition(":")
        data: JSON = {
            "user_id": str(user_id), "channel_id": message["channel_id"],
            "message_id": message["id"], "message_author_id": message["author"]["id"],
            "emoji": {"id": emoji_id, "name": name} if emoji_id else {"id": None, "name": emoji},
            "burst": False, "burst_colors": [], "type": 0,
        }
        in_guild = "guild_id" in message
        if in_guild:
            data.update(guild_id=message["guild_id"], member=self.world.member_payload(user_id))
        intent = Intent.GUILD_MESSAGE_REACTIONS if in_guild else Intent.DIRECT_MESSAGE_REACTIONS
        return self.dispatch("MESSAGE_REACTION_ADD", data, intents=intent)

    def dispatch_typing(self, channel: FakeChannel, user_id: int) -> int:
        data: JSON = {"channel_id": str(channel.id), "user_id": str(user_id),
                      "timestamp": int(time.time())}
        if channel.guild_id:
            data.update(guild_id=str(channel.guild_id), member=self.world.member_payload(user_id))
        intent = Intent.GUILD_MESSAGE_TYPING if channel.guild_id else Intent.DIRECT_MESSAGE_TYPING
        return self.dispatch("TYPING_START", data, intents=intent)

    def _detach(self, conn: GatewayConnection) -> None:
        if conn.session is not None and conn.session.connection is conn:
            conn.session.connection = None

    def _live(self) -> list[GatewayConnection]:
        return [conn for conn in self.connections if not conn.closing]

    def drop(self, code: int | None = None) -> int:
        """Abort sockets (``code=None``) or close them with ``code``; sessions stay resumable."""
        live = self._live()
        for conn in live:
            self._detach(conn)
            conn.abort() if code is None else conn.close(code, "Dropped by test.")
        return len(live)

    def reconnect(self) -> int:
        live = self._live()
        for conn in live:
            conn.send({"op": RECONNECT, "s": None, "t": None, "d": None})
            self._detach(conn)
        return len(live)

    def invalidate(self, *, resumable: bool = False) -> int:
        live = self._live()
        for conn in live:
            conn.send({"op": INVALID_SESSION, "s": None, "t": None, "d": resumable})
            self._detach(conn)
            if not resumable and conn.session is not None:
                self.sessions.pop(conn.session.id, None)
                conn.session = None  # the client may IDENTIFY again on this socket
        return len(live)

    def request_heartbeat(self) -> None:
        for conn in self._live():
            conn.send({"op": HEARTBEAT, "s": None, "t": None, "d": None})

    def has_live_session(self) -> bool:
        return any(s.connection is not None for s in self.sessions.values())

    async def close_all(self) -> None:
        """Close politely (1001 Going Away), then abort whatever is still hanging on."""
        for conn in list(self.connections):
            conn.close(1001, "Fake Discord shutting down.")
        try:
            await asyncio.wait_for(self._idle.wait(), timeout=2.0)
        except TimeoutError:
            for conn in list(self.connections):
                conn.abort()
