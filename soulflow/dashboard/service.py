"""The dashboard and the daemon's HTTP API (aiohttp).

Endpoints: `/healthz`, `/api/state`, `/api/events` (SSE), `/api/chat…` (the local channel),
`/api/dlq…` and `/api/cron…` (operator actions; cron's come from soulflow/cron/api.py),
`/` (the page). Every request but `/` and `/healthz` (no data there) passes, in order: the
Host/Origin/Sec-Fetch-Site rules of `guard.py` (403), the token when DASHBOARD_TOKEN is set
(401), and for POST/PUT/PATCH/DELETE a JSON-object body sent as `application/json`
(415/400). New routes are covered without opting in. Binding beyond loopback without a
token is refused in config. No response carries a CORS header, so a browser never lets
another site read an answer or send JSON here.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from importlib import resources
from typing import Any

from aiohttp import web

from soulflow.bus.bus import MessageBus
from soulflow.channels.local import InvalidChatId, LocalChannel
from soulflow.dashboard.guard import (
    SAFE_METHODS,
    Refused,
    RequestPolicy,
    decode_json_object,
    is_guarded,
)
from soulflow.events.hub import EventHub

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024 * 1024
SSE_KEEPALIVE_S = 15.0
CHAT_SUBMIT_TIMEOUT_S = 30.0


class DashboardError(Exception):
    """The dashboard could not start (port in use, address not available)."""


def _json_error(status: int, message: str) -> web.Response:
    return web.json_response({"ok": False, "error": message}, status=status)


async def _hardening_headers(request: web.Request, response: web.StreamResponse) -> None:
    """No sniffing, no framing (clickjacking), no referrer leaking a `#token=` URL's page."""
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("Content-Security-Policy", "frame-ancestors 'none'")
    response.headers.setdefault("Referrer-Policy", "no-referrer")


class DashboardService:
    def __init__(self, *, host: str, port: int, token: str, hub: EventHub,
                 state: Callable[[], dict[str, Any]], local: LocalChannel, bus: MessageBus,
                 ready: Callable[[], bool], allowed_hosts: Iterable[str] = (),
                 routes: Iterable[web.RouteDef] = ()) -> None:
        self.host = host
        self.policy = RequestPolicy.build(host, allowed_hosts)
        self.port = port
        self._token = token
        self._hub = hub
        self._state = state
        self._local = local
        self._bus = bus
        self._ready = ready
        self._routes = list(routes)  # other services' endpoints (cron), under the same guard
        self._runner: web.AppRunner | None = None
        self.bound_port: int | None = None

    # -- app -----------------------------------------------------------------------------

    def build_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES,
                              middlewares=[self._guard, self._auth, self._json_body])
        app.on_response_prepare.append(_hardening_headers)
        app.add_routes([
            web.get("/", self._page),
            web.get("/healthz", self._healthz),
            web.get("/api/state", self._api_state),
            web.get("/api/events", self._api_events),
            web.post("/api/chat", self._api_chat_post),
            web.get("/api/chat/{chat_id}/messages", self._api_chat_messages),
            web.get("/api/dlq", self._api_dlq_list),
            web.post("/api/dlq/replay", self._api_dlq_replay),
            web.post("/api/dlq/purge", self._api_dlq_purge),
            *self._routes,
        ])
        return app

    @web.middleware
    async def _guard(self, request: web.Request,
                     handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                     ) -> web.StreamResponse:
        """Host, Origin and Sec-Fetch-Site rules (see guard.py), before anything else."""
        if is_guarded(request.path):
            try:
                self.policy.check_source(request.headers, self.bound_port or self.port)
            except Refused as refused:
                log.info("dashboard refused %s %s: %s", request.method, request.path,
                         refused.reason)
                return _json_error(refused.status, refused.reason)
        return await handler(request)

    @web.middleware
    async def _json_body(self, request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                         ) -> web.StreamResponse:
        """State-changing requests carry a JSON object, read once and kept on the request."""
        if is_guarded(request.path) and request.method not in SAFE_METHODS:
            try:
                await self._body(request)
            except Refused as refused:
                return _json_error(refused.status, refused.reason)
        return await handler(request)

    @web.middleware
    async def _auth(self, request: web.Request,
                    handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                    ) -> web.StreamResponse:
        if self._token and is_guarded(request.path):
            header = request.headers.get("Authorization", "")
            supplied = header[7:] if header.startswith("Bearer ") else ""
            if not hmac.compare_digest(supplied.encode(), self._token.encode()):
                return _json_error(401, "missing or wrong token: send "
                                        "'Authorization: Bearer <DASHBOARD_TOKEN>'")
        return await handler(request)

    async def _page(self, request: web.Request) -> web.Response:
        html = resources.files("soulflow.dashboard").joinpath("static/index.html").read_text(
            encoding="utf-8")
        return web.Response(text=html, content_type="text/html")

    async def _healthz(self, request: web.Request) -> web.Response:
        ready = self._ready()
        return web.json_response({"ok": ready, "status": "ok" if ready else "starting"},
                                 status=200 if ready else 503)

    async def _api_state(self, request: web.Request) -> web.Response:
        return web.json_response(self._state())

    async def _api_events(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        subscription = self._hub.subscribe()
        try:
            for past in self._hub.recent(limit=20):
                await response.write(self._sse(past))
            while True:
                event = await subscription.next(SSE_KEEPALIVE_S)
                payload = b": keepalive\n\n" if event is None else \
                    self._sse(self._hub.export(event))
                await response.write(payload)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            subscription.close()
        return response

    @staticmethod
    def _sse(event: dict[str, Any]) -> bytes:
        data = json.dumps(event, ensure_ascii=False)
        return f"id: {event['id']}\nevent: {event['kind']}\ndata: {data}\n\n".encode()

    # -- local chat ----------------------------------------------------------------------

    @staticmethod
    async def _body(request: web.Request) -> dict[str, Any]:
        """The request's JSON object (aiohttp keeps the bytes, so the middleware's check
        and the handler's use read the body once)."""
        content_type = request.content_type if "Content-Type" in request.headers else ""
        return decode_json_object(content_type, await request.read())

    async def _api_chat_post(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        text, chat_id = body.get("text"), body.get("chat_id", "default")
        if not isinstance(text, str):
            return _json_error(400, "'text' must be a string")
        if not isinstance(chat_id, str):
            return _json_error(400, "'chat_id' must be a string")
        try:
            message_id = await asyncio.wait_for(
                self._local.submit(chat_id, text, sender_name=str(body.get("sender", "operator"))),
                CHAT_SUBMIT_TIMEOUT_S)
        except InvalidChatId as exc:
            return _json_error(400, str(exc))
        except TimeoutError:
            return _json_error(503, "the daemon did not accept the message in time; retry")
        return web.json_response({"ok": True, "chat_id": chat_id, "message_id": message_id},
                                 status=202)

    async def _api_chat_messages(self, request: web.Request) -> web.Response:
        chat_id = request.match_info["chat_id"]
        try:
            after = int(request.query.get("after", "-1"))
            wait = min(60.0, max(0.0, float(request.query.get("wait", "0"))))
        except ValueError:
            return _json_error(400, "'after' must be an integer and 'wait' a number of seconds")
        try:
            if wait > 0:
                messages = await self._local.wait_messages(chat_id, after, wait)
            else:
                messages = self._local.messages(chat_id, after)
        except InvalidChatId as exc:
            return _json_error(400, str(exc))
        return web.json_response({"ok": True, "chat_id": chat_id, "messages": messages})

    # -- DLQ -----------------------------------------------------------------------------

    async def _api_dlq_list(self, request: web.Request) -> web.Response:
        if request.query.get("inbound") in ("1", "true"):  # quarantined inbound messages
            return web.json_response({"ok": True, "entries": [
                e.to_dict() for e in self._bus.inbound_dlq.entries()]})
        return web.json_response({"ok": True,
                                  "entries": [e.to_dict() for e in self._bus.dlq.entries()]})

    async def _api_dlq_replay(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        ids = body.get("ids")
        if ids is not None and not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
            return _json_error(400, "'ids' must be a list of message ids")
        return web.json_response({"ok": True, "replayed": self._bus.replay_dlq(ids)})

    async def _api_dlq_purge(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "purged": self._bus.dlq.purge()})

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        self._runner = web.AppRunner(self.build_app(), access_log=None,
                                     handle_signals=False, shutdown_timeout=2.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            self._runner = None
            raise DashboardError(
                f"cannot listen on {self.host}:{self.port} ({exc.strerror or exc}); set "
                "DASHBOARD_PORT to a free port or stop the program using it") from None
        addresses = self._runner.addresses
        self.bound_port = int(addresses[0][1]) if addresses else self.port
        log.info("dashboard on http://%s:%s/", self.host, self.bound_port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
