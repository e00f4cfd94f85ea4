"""Loopback fake Discord speaking the real wire protocol (REST v10 + gateway websocket).

Built so the *real* discord.py client (2.7.x, no SDK mocking) can run against it.

How discord.py 2.7 finds Discord, and how to redirect it
--------------------------------------------------------
* REST: every request URL is ``Route.BASE + path`` where ``discord.http.Route.BASE``
  is a **class attribute** (``'https://discord.com/api/v10'``) read when each
  ``Route`` is constructed.  There is no per-client base URL: ``Client(proxy=...)``
  only proxies (HTTPS would CONNECT-tunnel to discord.com) and ``connector=`` /
  ``http_trace=`` cannot rewrite URLs.  So set ``Route.BASE`` process-wide before
  the client makes requests (``_set_api_version`` would reset it; don't call it).
* Gateway: a plain ``discord.Client`` never calls ``GET /gateway`` or
  ``/gateway/bot`` (only ``AutoShardedClient`` calls ``/gateway/bot``).
  ``Client.connect`` passes no URL, so ``DiscordWebSocket.from_client`` uses the
  **class attribute** ``discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY``
  (``yarl.URL('wss://gateway.discord.gg/')``) and appends
  ``?v=10&encoding=json&compress=zlib-stream``; the path is kept.  After READY it
  reconnects/resumes to READY's ``resume_gateway_url``; on INVALID_SESSION(false)
  it falls back to ``DEFAULT_GATEWAY`` again.  Both must therefore point here.
* Compression cannot be switched off from ``Client``: ``connect`` always uses
  ``compress=True``, giving ``compress=zstd-stream`` if ``zstandard`` (or py3.14
  ``compression.zstd``) is importable, else ``zlib-stream``.  The fake implements
  zlib-stream (shared ``compressobj`` + ``Z_SYNC_FLUSH`` per frame) and falls back
  to uncompressed text frames for anything else (discord.py parses TEXT frames as
  plain JSON, so that still works).  websocket per-message deflate is off (0).
* ``login()`` calls ``GET /users/@me`` (401 -> ``LoginFailure``) then
  ``GET /oauth2/applications/@me``.  ``on_ready`` fires ``guild_ready_timeout``
  (default 2.0 s; pass ``guild_ready_timeout=0.05`` to ``Client`` in tests) after
  the last GUILD_CREATE.  Every non-initial IDENTIFY (e.g. after INVALID_SESSION)
  is preceded by ``Client.before_identify_hook``, which sleeps 5 s by default;
  override it in tests.
* discord.py does not guard its event parsers: a *known* event with a missing
  required field (``MESSAGE_CREATE`` without ``id``) raises out of
  ``Client.start()``/``connect()`` and the client stops.  Unknown event names are
  ignored.  The adapter must supervise ``start()``.
* Like Discord, the fake echoes the bot's own sends as MESSAGE_CREATE (and edits,
  reactions, typing), blanks ``content``/attachments/embeds without the
  MESSAGE_CONTENT intent (except DMs, mentions and own messages), and sends the
  full member list in GUILD_CREATE only with MEMBERS+PRESENCES intents, otherwise
  discord.py chunks via op 8 and the fake answers GUILD_MEMBERS_CHUNK.
* Rate limits: a 429 is only honoured (sleep ``retry_after`` from the JSON body,
  retry) if the response has a ``Via`` header and ``Content-Type`` exactly
  ``application/json``; otherwise discord.py assumes a Cloudflare ban and raises.
  The fake sends both on every response (aiohttp's ``json_response`` would add
  ``; charset=utf-8`` which discord.py treats as text).

Exact redirection code (the adapter exposes DISCORD_API_URL / DISCORD_GATEWAY_URL)::

    import discord, discord.gateway, discord.http, yarl
    discord.http.Route.BASE = os.environ["DISCORD_API_URL"]        # http://127.0.0.1:PORT/api/v10
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(
        os.environ["DISCORD_GATEWAY_URL"])                          # ws://127.0.0.1:PORT/gateway
    client = discord.Client(intents=..., guild_ready_timeout=0.05)
    await client.start(token)

or ``with redirect_discord_py(fake.api_url, fake.gateway_url): ...`` which restores
both attributes.  Run standalone: ``python -m tests.fakes.discord_api --port 0``
prints ``READY <api_url> <gateway_url>``; drive it via ``POST /_fake/<action>``
(JSON kwargs) and read recordings via ``GET /_fake/state``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import threading
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

from aiohttp import web

from .discord_gateway import GatewayServer
from .discord_nonces import DEFAULT_WINDOW_S, NonceMemory
from .discord_objects import (
    DISCORD_ROUTE_LIMITS,
    JSON,
    MAX_CONTENT_LENGTH,
    AttachmentSpec,
    DiscordError,
    EditedMessage,
    FakeChannel,
    Fault,
    Intent,
    RateLimitBuckets,
    RecordedReaction,
    RecordedRequest,
    RecordedTyping,
    SentFile,
    SentMessage,
    World,
    attachment_payload,
    content_too_long_error,
    fault_matches,
    form_body_error,
    iso_now,
    json_response,
    no_content,
    rate_limited,
    read_message_body,
    unknown_reply_error,
)
from .loopback_base import ServedInBlock, client_port
from .rate_limits import TrafficCounters

API_PREFIX = "/api/v10"
RECORD_KEY = web.RequestKey("record", RecordedRequest)
NONCE_HIT = web.RequestKey("nonce_hit", bool)  # a create answered with an earlier message
HOLD_S = web.RequestKey("hold_s", float)  # delay_next on a create: seconds to hold it
T = TypeVar("T")

# (method, path template as in discord.py's Route, friendly name usable in fail_next)
ROUTES: tuple[tuple[str, str, str], ...] = (
    ("GET", "/users/@me", "get_me"),
    ("POST", "/users/@me/channels", "create_dm"),
    ("GET", "/users/{user_id}", "get_user"),
    ("GET", "/gateway", "get_gateway"),
    ("GET", "/gateway/bot", "get_bot_gateway"),
    ("GET", "/oauth2/applications/@me", "application_info"),
    ("GET", "/applications/@me", "get_application"),
    ("GET", "/channels/{channel_id}", "get_channel"),
    ("GET", "/channels/{channel_id}/messages", "get_messages"),
    ("POST", "/channels/{channel_id}/messages", "send_message"),
    ("GET", "/channels/{channel_id}/messages/{message_id}", "get_message"),
    ("PATCH", "/channels/{channel_id}/messages/{message_id}", "edit_message"),
    ("DELETE", "/channels/{channel_id}/messages/{message_id}", "delete_message"),
    ("PUT", "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me", "add_reaction"),
    ("DELETE", "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me",
     "remove_reaction"),
    ("POST", "/channels/{channel_id}/typing", "typing"),
    ("GET", "/guilds/{guild_id}", "get_guild"),
    ("GET", "/guilds/{guild_id}/channels", "get_guild_channels"),
    ("GET", "/guilds/{guild_id}/members/{user_id}", "get_member"),
)
ROUTE_NAMES = {f"{method} {path}": name for method, path, name in ROUTES}
#: Feedback a bot may drop under pressure; counted so benches see a flood of them.
BEST_EFFORT_ROUTES = frozenset({"typing", "add_reaction", "remove_reaction", "edit_message"})
CONTROL_ACTIONS = ("push_message", "push_reaction", "push_raw_dispatch", "drop_connection",
                   "send_reconnect", "invalidate_session", "fail_next", "delay_next",
                   "stats", "set_limits")


class FakeDiscord(ServedInBlock):
    """aiohttp app serving REST under ``/api/v10``, the gateway and a tiny CDN."""

    def __init__(self, *, token: str = "fake-bot-token", heartbeat_interval_ms: int = 41250,
                 allowed_intents: int = int(Intent.GUILD_MEMBERS | Intent.MESSAGE_CONTENT
                                            | Intent.GUILD_PRESENCES),
                 rate_limit: tuple[int, float] = (50, 1.0), echo_own_messages: bool = True,
                 route_limits: dict[str, tuple[int, float]] | None = None,
                 enforce_limits: bool = True, nonce_window_s: float = DEFAULT_WINDOW_S,
                 **world_options: Any) -> None:
        self.token = token
        # message creates with `enforce_nonce` (discord_nonces.py): a resend returns the first
        self.nonces = NonceMemory(nonce_window_s)
        self.world = World(**world_options)
        self.echo_own_messages = echo_own_messages
        self.gateway = GatewayServer(self.world, token, heartbeat_interval_ms=heartbeat_interval_ms,
                                     allowed_intents=allowed_intents, on_change=self._touch)
        # Discord's limits are on by default (send_message: 5 per 5 s per channel) and
        # announced in X-RateLimit-* headers, so discord.py paces itself as it does in prod.
        self.buckets = RateLimitBuckets(
            *rate_limit, DISCORD_ROUTE_LIMITS if route_limits is None else route_limits,
            enabled=enforce_limits)
        self.counters = TrafficCounters()
        self.requests: list[RecordedRequest] = []
        self.sent_messages: list[SentMessage] = []
        self.edits: list[EditedMessage] = []
        self.deleted: list[tuple[int, int]] = []
        self.reactions: list[RecordedReaction] = []
        self.typing: list[RecordedTyping] = []
        self._failures: list[Fault] = []
        self._delays: list[Fault] = []
        self._cdn: dict[str, tuple[bytes, str | None]] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    # -- lifecycle ----------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024 * 1024)
        for method, path, name in ROUTES:
            app.router.add_route(method, API_PREFIX + path, getattr(self, f"_h_{name}"))
        app.router.add_get("/gateway", self.gateway.handle)
        app.router.add_get("/gateway/resume", self.gateway.handle)
        app.router.add_get("/_fake/state", self._control_state)
        app.router.add_post("/_fake/{action}", self._control_action)
        app.router.add_get("/{tail:(?!api/).*}", self._serve_cdn)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        bound_port = self._runner.addresses[0][1]
        self.base_url = f"http://{host}:{bound_port}"
        self.gateway.resume_url = f"ws://{host}:{bound_port}/gateway/resume"

    async def stop(self) -> None:
        if self._runner is not None:
            await self.gateway.close_all()
            await self._runner.cleanup()
            self._runner = None

    @property
    def api_url(self) -> str:
        return f"{self.base_url}{API_PREFIX}"

    @property
    def gateway_url(self) -> str:
        return self.base_url.replace("http://", "ws://", 1) + "/gateway"

    # -- convenient world accessors -------------------------------------------

    @property
    def bot_user_id(self) -> int:
        return self.world.bot.id

    @property
    def guild_id(self) -> int:
        return self.world.guild_id

    @property
    def channel_ids(self) -> dict[str, int]:
        return self.world.channel_ids

    @property
    def user_ids(self) -> dict[str, int]:
        return self.world.by_name

    @property
    def identifies(self) -> list[JSON]:
        return self.gateway.identifies

    @property
    def resumes(self) -> list[JSON]:
        return self.gateway.resumes

    @property
    def connections(self) -> list[Any]:
        return self.gateway.connection_log

    def dm_channel_id(self, user_id: int) -> int:
        return self.world.dm_channel(user_id).id

    # -- waiting -------------------------------------------------------------

    def _touch(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait_for(self, predicate: Callable[[], T], timeout: float = 5.0) -> T:
        """Re-check ``predicate`` whenever the fake records something; return its truthy value."""
        async with asyncio.timeout(timeout):
            while not (result := predicate()):
                fut = asyncio.get_running_loop().create_future()
                self._waiters.append(fut)
                await fut
            return result

    async def wait_until_connected(self, timeout: float = 5.0) -> None:
        await self.wait_for(self.gateway.has_live_session, timeout)

    # -- fault injection -------------------------------------------------------

    def fail_next(self, route: str, status: int, retry_after: float | None = None,
                  count: int = 1, *, is_global: bool = False, body: JSON | None = None) -> None:
        """Fail the next ``count`` matching requests (429 gets Discord's rate-limit shape)."""
        if status == 429 and retry_after is None:
            retry_after = 1.5
        self._failures.append(Fault(route, status, retry_after, is_global, count=count, body=body))

    def delay_next(self, route: str, seconds: float, count: int = 1) -> None:
        self._delays.append(Fault(route, delay=seconds, count=count))

    def _take(self, faults: list[Fault], route: str, name: str | None, request: web.Request
              ) -> Fault | None:
        for fault in faults:
            if fault_matches(fault.pattern, route, name, request.method,
                             request.path.removeprefix(API_PREFIX)):
                fault.count -= 1
                if fault.count <= 0:
                    faults.remove(fault)
                return fault
        return None

    # -- request pipeline ---------------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request,
                          handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                          ) -> web.StreamResponse:
        if not request.path.startswith(API_PREFIX + "/"):
            return await handler(request)
        resource = request.match_info.route.resource
        template = resource.canonical.removeprefix(API_PREFIX) if resource else request.path
        route = f"{request.method} {template}"
        record = RecordedRequest(request.method, request.path.removeprefix(API_PREFIX), route,
                                 ROUTE_NAMES.get(route), dict(request.headers),
                                 dict(request.query), client_port=client_port(request))
        self.requests.append(record)
        request[RECORD_KEY] = record
        try:
            response = await self._serve(request, handler, record)
        except DiscordError as exc:
            response = json_response(exc.body, exc.status)
        except web.HTTPException as exc:
            response = json_response({"message": f"{exc.status}: {exc.reason}", "code": 0},
                                     exc.status)
        except ValueError:  # e.g. a non-numeric snowflake in the path
            response = json_response({"message": "Invalid Form Body", "code": 50035}, 400)
        record.status = response.status
        self._touch()
        return response

    async def _serve(self, request: web.Request,
                     handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                     record: RecordedRequest) -> web.StreamResponse:
        if record.name is None:
            raise request.match_info.http_exception or web.HTTPNotFound()
        if request.headers.get("Authorization") != f"Bot {self.token}":
            raise DiscordError(401, "401: Unauthorized")
        if delay := self._take(self._delays, record.route, record.name, request):
            if record.name == "send_message":  # held after its body is read (the handler)
                request[HOLD_S] = delay.delay
            else:
                await asyncio.sleep(delay.delay)
        key = f"{record.name}|{record.route}:{request.match_info.get('channel_id') or ''}"
        if record.name in BEST_EFFORT_ROUTES:
            self.counters.best_effort[record.name] += 1
        if failure := self._take(self._failures, record.route, record.name, request):
            response = self._failure_response(failure, key)
        else:
            remaining, reset_after = self.buckets.hit(key)
            if remaining < 0:
                response = rate_limited(reset_after, is_global=False, key=key,
                                        buckets=self.buckets)
            else:
                response = await handler(request)
                response.headers.update(self.buckets.headers(key, remaining, reset_after))
                if record.name == "send_message" and not request.get(NONCE_HIT):
                    self.counters.replies += 1
        if response.status == 429:
            self.counters.rate_limited[record.name] += 1
        return response

    def stats(self) -> JSON:
        """Replies accepted, 429s returned per route, best-effort calls received."""
        return self.counters.snapshot()

    def set_limits(self, enforce: bool) -> None:
        """Switch the 429s of the rate-limit buckets on or off (headers stay)."""
        self.buckets.enabled = enforce

    def _failure_response(self, fault: Fault, key: str) -> web.Response:
        if fault.status == 429:
            return rate_limited(fault.retry_after or 0.0, is_global=fault.is_global, key=key,
                                buckets=self.buckets)
        status = fault.status or 500
        body = fault.body or {"message": f"{status}: Injected failure", "code": 0}
        return json_response(body, status)

    # -- lookups ------------------------------------------------------------

    def _channel(self, request: web.Request) -> FakeChannel:
        channel = self.world.channels.get(int(request.match_info["channel_id"]))
        if channel is None:
            raise DiscordError(404, "Unknown Channel", 10003)
        return channel

    def _message(self, request: web.Request) -> JSON:
        channel = self._channel(request)
        message = self.world.messages.get(int(request.match_info["message_id"]))
        if message is None or int(message["channel_id"]) != channel.id:
            raise DiscordError(404, "Unknown Message", 10008)
        return message

    def _guild(self, request: web.Request) -> None:
        if int(request.match_info["guild_id"]) != self.world.guild_id:
            raise DiscordError(404, "Unknown Guild", 10004)

    def _known_user(self, user_id: int) -> None:
        if user_id not in self.world.users:
            raise DiscordError(404, "Unknown User", 10013)

    # -- REST handlers ---------------------------------------------------------

    async def _h_get_me(self, request: web.Request) -> web.Response:
        user = self.world.bot.payload()
        user.update(verified=True, mfa_enabled=False, email=None, locale="en-US")
        return json_response(user)

    async def _h_get_user(self, request: web.Request) -> web.Response:
        user_id = int(request.match_info["user_id"])
        self._known_user(user_id)
        return json_response(self.world.users[user_id].payload())

    async def _h_create_dm(self, request: web.Request) -> web.Response:
        body, _ = await read_message_body(request)
        request[RECORD_KEY].json = body
        user_id = int(body.get("recipient_id", 0))
        self._known_user(user_id)
        return json_response(self.world.channel_payload(self.world.dm_channel(user_id)))

    async def _h_get_gateway(self, request: web.Request) -> web.Response:
        return json_response({"url": self.gateway_url})

    async def _h_get_bot_gateway(self, request: web.Request) -> web.Response:
        limit = {"total": 1000, "remaining": 999, "reset_after": 86_400_000, "max_concurrency": 1}
        return json_response({"url": self.gateway_url, "shards": 1, "session_start_limit": limit})

    async def _h_application_info(self, request: web.Request) -> web.Response:
        return json_response(self.world.app_info_payload())

    _h_get_application = _h_application_info

    async def _h_get_channel(self, request: web.Request) -> web.Response:
        return json_response(self.world.channel_payload(self._channel(request)))

    async def _h_get_messages(self, request: web.Request) -> web.Response:
        channel = self._channel(request)
        limit = min(int(request.query.get("limit", 50)), 100)
        before = int(request.query.get("before", 1 << 63))
        after = int(request.query.get("after", 0))
        found = [m for m in self.world.channel_messages(channel.id)
                 if after < int(m["id"]) < before]
        found.sort(key=lambda m: int(m["id"]), reverse=True)  # always sent newest first
        if "after" in request.query and "before" not in request.query:
            # `after` alone pages forward: the `limit` messages right after it (Discord's
            # `?after=<channel id>&limit=1` is a channel's first message), not the newest
            return json_response(found[-limit:])
        return json_response(found[:limit])

    async def _h_get_message(self, request: web.Request) -> web.Response:
        return json_response(self._message(request))

    async def _h_send_message(self, request: web.Request) -> web.Response:
        channel = self._channel(request)
        payload, files = await read_message_body(request)
        request[RECORD_KEY].json = payload
        # a held create is still made when the client has gone meanwhile (its body was read)
        await asyncio.sleep(request.get(HOLD_S, 0.0))
        reply_to = self._validate_outgoing(channel, payload, files)
        try:
            nonce = NonceMemory.key_of(payload)
        except ValueError as exc:
            raise DiscordError(400, "Invalid Form Body",
                               body=form_body_error("nonce", "BASE_TYPE_BAD_LENGTH", str(exc))
                               ) from None
        if nonce is not None and (
                first := self.nonces.existing(channel.id, self.bot_user_id, nonce)):
            request[NONCE_HIT] = True  # Discord answers with the first message, creates nothing
            return json_response(first)
        attachments = [self._store_upload(channel.id, index, upload, payload)
                       for index, upload in enumerate(files)]
        message = self.world.build_message(
            channel, self.bot_user_id, payload.get("content") or "", attachments=attachments,
            reply_to=reply_to, extra=self._outgoing_extras(payload))
        self.sent_messages.append(SentMessage(channel.id, payload.get("content"), payload,
                                              message, files, reply_to))
        if nonce is not None:
            self.nonces.remember(channel.id, self.bot_user_id, nonce, message)
        if self.echo_own_messages:
            self.gateway.dispatch_message("MESSAGE_CREATE", message)
        return json_response(message)

    def _validate_outgoing(self, channel: FakeChannel, payload: JSON, files: list[SentFile]
                           ) -> int | None:
        content = payload.get("content") or ""
        if len(content) > MAX_CONTENT_LENGTH:
            raise DiscordError(400, "Invalid Form Body", body=content_too_long_error())
        if not (content or files or payload.get("embeds") or payload.get("sticker_ids")
                or payload.get("components") or payload.get("poll")):
            raise DiscordError(400, "Cannot send an empty message", 50006)
        reference = payload.get("message_reference") or {}
        if not reference.get("message_id"):
            return None
        reply_to = int(reference["message_id"])
        if reply_to not in self.world.messages and reference.get("fail_if_not_exists", True):
            raise DiscordError(400, "Invalid Form Body", body=unknown_reply_error())
        return reply_to

    @staticmethod
    def _outgoing_extras(payload: JSON) -> JSON:
        extras = {key: payload[key] for key in ("embeds", "components", "tts") if key in payload}
        if payload.get("nonce") is not None:
            extras["nonce"] = payload["nonce"]
        return extras

    def _store_upload(self, channel_id: int, index: int, upload: SentFile, payload: JSON) -> JSON:
        meta = next((a for a in payload.get("attachments", []) if str(a.get("id")) == str(index)),
                    {})
        filename = meta.get("filename") or upload.filename
        return self._register_attachment(channel_id, filename, upload.data, upload.content_type)

    def _register_attachment(self, channel_id: int, filename: str, data: bytes,
                             content_type: str | None) -> JSON:
        attachment_id = self.world.ids.next()
        path = f"/attachments/{channel_id}/{attachment_id}/{urllib.parse.quote(filename)}"
        self._cdn[path] = (data, content_type)
        return attachment_payload(attachment_id, filename, data, self.base_url + path,
                                  content_type)

    async def _h_edit_message(self, request: web.Request) -> web.Response:
        message = self._message(request)
        if int(message["author"]["id"]) != self.bot_user_id:
            raise DiscordError(403, "Cannot edit a message authored by another user", 50005)
        payload, _files = await read_message_body(request)
        request[RECORD_KEY].json = payload
        if len(payload.get("content") or "") > MAX_CONTENT_LENGTH:
            raise DiscordError(400, "Invalid Form Body", body=content_too_long_error())
        message.update({k: v for k, v in payload.items() if k in ("content", "embeds",
                                                                  "components", "flags")})
        message["edited_timestamp"] = iso_now()
        self.edits.append(EditedMessage(int(message["channel_id"]), int(message["id"]),
                                        payload, message))
        if self.echo_own_messages:
            self.gateway.dispatch_message("MESSAGE_UPDATE", message)
        return json_response(message)

    async def _h_delete_message(self, request: web.Request) -> web.Response:
        message = self._message(request)
        del self.world.messages[int(message["id"])]
        self.deleted.append((int(message["channel_id"]), int(message["id"])))
        data = {"id": message["id"], "channel_id": message["channel_id"]}
        if "guild_id" in message:
            data["guild_id"] = message["guild_id"]
        self.gateway.dispatch_message("MESSAGE_DELETE", data, in_guild="guild_id" in message)
        return no_content()

    async def _h_add_reaction(self, request: web.Request) -> web.Response:
        message = self._message(request)
        emoji = urllib.parse.unquote(request.match_info["emoji"])
        self.reactions.append(RecordedReaction(int(message["channel_id"]), int(message["id"]),
                                               emoji))
        if self.echo_own_messages:
            self.gateway.dispatch_reaction(message, self.bot_user_id, emoji)
        return no_content()

    async def _h_remove_reaction(self, request: web.Request) -> web.Response:
        message = self._message(request)
        emoji = urllib.parse.unquote(request.match_info["emoji"])
        self.reactions.append(RecordedReaction(int(message["channel_id"]), int(message["id"]),
                                               emoji, removed=True))
        return no_content()

    async def _h_typing(self, request: web.Request) -> web.Response:
        channel = self._channel(request)
        self.typing.append(RecordedTyping(channel.id, time.time()))
        if self.echo_own_messages:
            self.gateway.dispatch_typing(channel, self.bot_user_id)
        return no_content()

    async def _h_get_guild(self, request: web.Request) -> web.Response:
        self._guild(request)
        return json_response(self.world.guild_payload())

    async def _h_get_guild_channels(self, request: web.Request) -> web.Response:
        self._guild(request)
        channels = [c for c in self.world.channels.values() if c.guild_id]
        return json_response([self.world.channel_payload(c) for c in channels])

    async def _h_get_member(self, request: web.Request) -> web.Response:
        self._guild(request)
        user_id = int(request.match_info["user_id"])
        if user_id not in self.world.member_ids:
            raise DiscordError(404, "Unknown Member", 10007)
        return json_response(self.world.member_payload(user_id))

    async def _serve_cdn(self, request: web.Request) -> web.Response:
        stored = self._cdn.get(request.path)
        if stored is None:
            return web.Response(status=404, text="Not Found")
        data, content_type = stored
        return web.Response(body=data, content_type=content_type or "application/octet-stream")

    # -- test-side event injection ------------------------------------------------

    def _require_session(self) -> None:
        if not self.gateway.sessions:
            raise RuntimeError("no gateway session yet: await fake.wait_until_connected() first")

    def add_attachment_file(self, url_path: str, data: bytes, content_type: str | None = None
                            ) -> str:
        """Serve ``data`` at ``url_path`` (e.g. ``/attachments/1/2/a.txt``); returns full URL."""
        path = url_path if url_path.startswith("/") else f"/{url_path}"
        self._cdn[path] = (data, content_type)
        return self.base_url + path

    def push_message(self, channel_id: int, content: str, author_id: int, *, bot: bool = False,
                     mentions_bot: bool = False, reply_to: int | None = None,
                     attachments: Sequence[AttachmentSpec | tuple[str, bytes]] | None = None
                     ) -> JSON:
        """A user (or other bot) posts a message: dispatch MESSAGE_CREATE; returns the payload."""
        self._require_session()
        channel = self.world.channels[channel_id]
        mention = f"<@{self.bot_user_id}>"
        if mentions_bot and mention not in content:
            content = f"{mention} {content}"
        specs = [a if isinstance(a, AttachmentSpec) else AttachmentSpec(*a)
                 for a in attachments or []]
        files = [self._register_attachment(channel_id, s.filename, s.data, s.content_type)
                 for s in specs]
        message = self.world.build_message(
            channel, author_id, content, mentions=[self.bot_user_id] if mentions_bot else [],
            attachments=files, reply_to=reply_to)
        if bot:
            message["author"].update(bot=True, global_name=None)
        self.gateway.dispatch_message("MESSAGE_CREATE", message)
        return message

    def push_reaction(self, channel_id: int, message_id: int, user_id: int, emoji: str) -> None:
        """MESSAGE_REACTION_ADD for ``emoji`` ("👍" or custom "name:id")."""
        self._require_session()
        stub = {"id": str(message_id), "channel_id": str(channel_id),
                "author": {"id": str(self.bot_user_id)}}
        channel = self.world.channels[channel_id]
        if channel.guild_id:
            stub["guild_id"] = str(channel.guild_id)
        self.gateway.dispatch_reaction(self.world.messages.get(message_id, stub), user_id, emoji)

    def push_raw_dispatch(self, t: str, d: Any) -> None:
        """Send any op 0 dispatch verbatim (malformed payloads included)."""
        self._require_session()
        self.gateway.dispatch(t, d)

    def drop_connection(self, code: int | None = None) -> int:
        """Abort live sockets (``code=None``) or close with ``code``; sessions stay resumable."""
        return self.gateway.drop(code)

    def send_reconnect(self) -> int:
        return self.gateway.reconnect()

    def invalidate_session(self, resumable: bool = False) -> int:
        return self.gateway.invalidate(resumable=resumable)

    def request_heartbeat(self) -> None:
        self.gateway.request_heartbeat()

    # -- control surface for out-of-process use -------------------------------------

    def state(self) -> JSON:
        """JSON-safe snapshot of everything recorded (used by ``GET /_fake/state``)."""
        def dump(items: Sequence[Any]) -> list[Any]:
            return [dataclasses.asdict(i) if dataclasses.is_dataclass(i) else i for i in items]
        sent = [{**dataclasses.asdict(m), "files": [{**dataclasses.asdict(f), "data": f.data.hex()}
                                                  for f in m.files]} for m in self.sent_messages]
        return {"api_url": self.api_url, "gateway_url": self.gateway_url,
                "bot_user_id": self.bot_user_id, "guild_id": self.guild_id,
                "channel_ids": self.channel_ids, "user_ids": self.user_ids,
                "sent_messages": sent, "edits": dump(self.edits), "reactions": dump(self.reactions),
                "typing": dump(self.typing), "requests": dump(self.requests),
                "identifies": self.identifies, "resumes": self.resumes,
                "connections": dump(self.connections),
                "connected": self.gateway.has_live_session()}

    async def _control_state(self, request: web.Request) -> web.Response:
        return web.json_response(self.state())

    async def _control_action(self, request: web.Request) -> web.Response:
        action = request.match_info["action"]
        if action not in CONTROL_ACTIONS:
            return web.json_response({"error": f"unknown action {action}"}, status=404)
        kwargs = await request.json() if request.can_read_body else {}
        if isinstance(kwargs.get("attachments"), list):
            kwargs["attachments"] = [AttachmentSpec(a["filename"], bytes.fromhex(a["data_hex"]),
                                                    a.get("content_type"))
                                     for a in kwargs["attachments"]]
        try:
            result = getattr(self, action)(**kwargs)
        except (RuntimeError, TypeError, KeyError) as exc:
            return web.json_response({"error": repr(exc)}, status=400)
        return web.json_response({"result": result})


@contextlib.contextmanager
def redirect_discord_py(api_url: str, gateway_url: str) -> Iterator[None]:
    """Point discord.py's class-level REST base and default gateway here; restore on exit."""
    import discord.gateway
    import discord.http
    import yarl

    route, socket = discord.http.Route, discord.gateway.DiscordWebSocket
    old_base, old_gateway = route.BASE, socket.DEFAULT_GATEWAY
    route.BASE, socket.DEFAULT_GATEWAY = api_url, yarl.URL(gateway_url)
    try:
        yield
    finally:
        route.BASE, socket.DEFAULT_GATEWAY = old_base, old_gateway


class FakeDiscordThread:
    """Runs a :class:`FakeDiscord` on its own loop in a daemon thread.

    For end-to-end tests where the daemon under test is a subprocess (or runs its
    own loop): every public ``FakeDiscord`` method is reachable as a blocking,
    thread-safe call, e.g. ``runner.push_message(...)`` or
    ``runner.wait_for(lambda: runner.fake.sent_messages, timeout=5)``.  Recorded
    lists are returned as copies taken on the fake's loop.
    """

    _RECORDS = ("requests", "sent_messages", "edits", "deleted", "reactions", "typing",
                "identifies", "resumes", "connections")

    def __init__(self, host: str = "127.0.0.1", port: int = 0, **fake_options: Any) -> None:
        self.fake = FakeDiscord(**fake_options)
        self._address = (host, port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-discord",
                                        daemon=True)

    def __enter__(self) -> FakeDiscordThread:
        self._thread.start()
        self.call(self.fake.start, *self._address)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.call(self.fake.stop)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()

    def call(self, func: Callable[..., Any], *args: Any, timeout: float = 30.0,
             **kwargs: Any) -> Any:
        """Run ``func`` on the fake's loop (awaiting it if it is a coroutine function)."""
        async def invoke() -> Any:
            result = func(*args, **kwargs)
            return await result if asyncio.iscoroutine(result) else result
        return asyncio.run_coroutine_threadsafe(invoke(), self._loop).result(timeout)

    def wait_for(self, predicate: Callable[[], T], timeout: float = 5.0) -> T:
        return self.call(self.fake.wait_for, predicate, timeout, timeout=timeout + 1.0)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "fake":
            raise AttributeError(name)
        if name in self._RECORDS:
            return self.call(lambda: list(getattr(self.fake, name)))
        target = getattr(self.fake, name)
        if not callable(target):
            return target
        return lambda *args, **kwargs: self.call(target, *args, **kwargs)


async def _serve_forever(host: str, port: int, options: JSON) -> None:
    fake = FakeDiscord(**options)
    await fake.start(host, port)
    print(f"READY {fake.api_url} {fake.gateway_url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await fake.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run the loopback fake Discord.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default="fake-bot-token")
    parser.add_argument("--heartbeat-ms", type=int, default=41250)
    parser.add_argument("--no-limits", action="store_true",
                        help="never answer 429 (X-RateLimit-* headers are still sent)")
    args = parser.parse_args(argv)
    options = {"token": args.token, "heartbeat_interval_ms": args.heartbeat_ms,
               "enforce_limits": not args.no_limits}
    asyncio.run(_serve_forever(args.host, args.port, options))


if __name__ == "__main__":
    main()
