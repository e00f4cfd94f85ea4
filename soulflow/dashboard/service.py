"""The dashboard and the daemon's HTTP API (aiohttp).

Endpoints: `/healthz`, `/api/state`, `/api/events` (SSE), `/api/chat…` (the local channel),
`/api/dlq…` (operator actions), `/` (the page). `/api/*` needs `Authorization: Bearer <token>`
when DASHBOARD_TOKEN is set; binding beyond loopback without a token is refused in config.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from aiohttp import web

from soulflow.bus.bus import MessageBus
from soulflow.channels.local import InvalidChatId, LocalChannel
from soulflow.events.hub import EventHub

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024 * 1024
SSE_KEEPALIVE_S = 15.0
CHAT_SUBMIT_TIMEOUT_S = 30.0


class DashboardError(Exception):
    """The dashboard could not start (port in use, address not available)."""


def _json_error(status: int, message: str) -> web.Response:
    return web.json_response({"ok": False, "error": message}, status=status)


class DashboardService:
    def __init__(self, *, host: str, port: int, token: str, hub: EventHub,
                 state: Callable[[], dict[str, Any]], local: LocalChannel, bus: MessageBus,
                 ready: Callable[[], bool]) -> None:
        self.host = host
        self.port = port
        self._token = token
        self._hub = hub
        self._state = state
        self._local = local
        self._bus = bus
        self._ready = ready
        self._runner: web.AppRunner | None = None
        self.bound_port: int | None = None

    # -- app -----------------------------------------------------------------------------

    def build_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._auth])
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
        ])
        return app

    @web.middleware
    async def _auth(self, request: web.Request,
                    handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                    ) -> web.StreamResponse:
        if self._token and request.path.startswith("/api/"):
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

    async def _read_json(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        try:
            body = json.loads(raw.decode("utf-8")) if raw else {}
        except UnicodeDecodeError:
            raise web.HTTPBadRequest(text=json.dumps(
                {"ok": False, "error": "the request body is not valid UTF-8"}),
                content_type="application/json") from None
        except json.JSONDecodeError as exc:
            raise web.HTTPBadRequest(text=json.dumps(
                {"ok": False, "error": f"the request body is not valid JSON: {exc}"}),
                content_type="application/json") from None
        if not isinstance(body, dict):
            raise web.HTTPBadRequest(text=json.dumps(
                {"ok": False, "error": "the request body must be a JSON object"}),
                content_type="application/json")
        return body

    async def _api_chat_post(self, request: web.Request) -> web.Response:
        body = await self._read_json(request)
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
        return web.json_response({"ok": True,
                                  "entries": [e.to_dict() for e in self._bus.dlq.entries()]})

    async def _api_dlq_replay(self, request: web.Request) -> web.Response:
        body = await self._read_json(request)
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
