"""The dashboard and the daemon's HTTP API (aiohttp).

Endpoints: `/healthz`, `/api/state`, `/api/events` (SSE, `Last-Event-ID` replay),
`/api/chat…` (the local channel), `/api/dlq…`, `/api/cron…` (cron's come from
soulflow/cron/api.py), `/api/approvals/decide`, `/api/runs/cancel`, `/api/tasks/cancel`
(operator actions, actions.py), `/metrics` (Prometheus text, metrics.py), `/` and
`/static/<asset>` (the page). Every request but the page, its assets and `/healthz` (no data
there) passes, in order: the
Host/Origin/Sec-Fetch-Site rules of `guard.py` (403), the token when DASHBOARD_TOKEN is set
(401), and for POST/PUT/PATCH/DELETE a JSON-object body sent as `application/json`
(415/400). New routes are covered without opting in. Binding beyond loopback without a
token is refused in config. No response carries a CORS header, so a browser never lets
another site read an answer or send JSON here. Before any of that, every connection is
admitted and timed by the gate of connections.py (caps in all and per address, a deadline
for each request head), so slow clients cannot hold the daemon's file descriptors.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import resource
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from importlib import resources
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from soulflow.bus.bus import MessageBus
from soulflow.channels.local.adapter import InvalidChatId, LocalChannel
from soulflow.channels.local.edits import collapse_edits
from soulflow.dashboard.actions import ActionError, ConsoleActions, Operator
from soulflow.dashboard.connections import ConnectionGate, ConnectionLimits
from soulflow.dashboard.console import Console
from soulflow.dashboard.guard import (
    SAFE_METHODS,
    STATIC_ASSETS,
    Refused,
    RequestPolicy,
    decode_json_object,
    is_guarded,
)
from soulflow.dashboard.listener import IN_FLIGHT, PortReservation, cannot_listen, listen
from soulflow.dashboard.metrics import CONTENT_TYPE, render_metrics
from soulflow.events.hub import EventHub
from soulflow.runtime.view import DaemonView

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024 * 1024
SSE_KEEPALIVE_S = 15.0
CHAT_SUBMIT_TIMEOUT_S = 30.0


def _json_error(status: int, message: str) -> web.Response:
    return web.json_response({"ok": False, "error": message}, status=status)


#: the page loads scripts and styles from its own origin only: a chat message that slipped
#: into markup could still not run (the page inserts all data as text anyway)
PAGE_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
ASSET_TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
#: actions whose answer always carries the new state; the DLQ and cron routes (also used
#: by the CLI) add it when the caller sends this header, as the page does
CONSOLE_ACTIONS = frozenset({"/api/approvals/decide", "/api/runs/cancel", "/api/tasks/cancel"})
STATE_HEADER = "X-SoulFlow-State"
ActionHandler = Callable[[dict[str, Any], Operator], Coroutine[Any, Any, dict[str, Any]]]


async def _hardening_headers(request: web.Request, response: web.StreamResponse) -> None:
    """No sniffing, no framing (clickjacking), no referrer leaking a `#token=` URL's page."""
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("Content-Security-Policy", PAGE_CSP)
    response.headers.setdefault("Referrer-Policy", "no-referrer")


def _no_model_answers(state: dict[str, Any]) -> None:
    """Every configured provider failed its last call: nothing can answer, so the daemon is
    not `ok` and says why (one provider failing among others is the fallback's job)."""
    providers = state.get("providers") or []
    if not providers or any(p.get("healthy", True) for p in providers):
        return
    for provider in providers:
        state.setdefault("problems", []).append(
            f"model provider {provider['name']} failed its last call: "
            f"{provider.get('last_error') or 'no answer'}")
    state["ok"] = False


class DashboardService:
    def __init__(self, *, host: str, port: int, token: str, hub: EventHub,
                 state: Callable[[], Awaitable[dict[str, Any]]], local: LocalChannel,
                 bus: MessageBus,
                 ready: Callable[[], bool], allowed_hosts: Iterable[str] = (),
                 routes: Iterable[web.RouteDef] = (), runtime: DaemonView | None = None,
                 limits: ConnectionLimits | None = None,
                 reservation: PortReservation | None = None) -> None:
        self.host = host
        self.policy = RequestPolicy.build(host, allowed_hosts)
        self.port = port
        self._token = token
        self._hub = hub
        self._state = state
        self._local = local
        self._bus = bus
        self._sections_failing = False  # the console's sections failed to read last time
        self._ready = ready
        self._routes = list(routes)  # other services' endpoints (cron), under the same guard
        # the operator's console (state sections, actions, /metrics) reads the daemon through
        # its DaemonView (soulflow/runtime/view.py)
        self._runtime = runtime
        self._console = Console(runtime, runtime.redactor.redact_obj) \
            if runtime is not None else None
        self._actions = ConsoleActions(runtime, hub.publish) if runtime is not None else None
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None
        # slow or too many clients (see connections.py); fitted to the fd limit at start
        self.gate = ConnectionGate(limits or ConnectionLimits())
        self.bound_port: int | None = None
        # the port, bound before the runtime created anything (listener.PortReservation)
        self._reservation = reservation

    # -- app -----------------------------------------------------------------------------

    def build_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES,
                              middlewares=[self._guard, self._auth, self._json_body,
                                           self._audit])
        app.on_response_prepare.append(_hardening_headers)
        console: list[web.RouteDef] = []
        if self._actions is not None:
            actions = self._actions
            console = [web.get("/metrics", self._metrics),
                       web.post("/api/approvals/decide", self._action(actions.decide)),
                       web.post("/api/runs/cancel", self._action(actions.cancel_run)),
                       web.post("/api/tasks/cancel", self._action(actions.cancel_task))]
        app.add_routes([
            web.get("/", self._page),
            *[web.get(f"/static/{name}", self._asset) for name in STATIC_ASSETS],
            web.get("/healthz", self._healthz),
            web.get("/api/state", self._api_state),
            web.get("/api/events", self._api_events),
            web.post("/api/chat", self._api_chat_post),
            web.get("/api/chat/{chat_id}/messages", self._api_chat_messages),
            web.get("/api/dlq", self._api_dlq_list),
            web.post("/api/dlq/replay", self._api_dlq_replay),
            web.post("/api/dlq/purge", self._api_dlq_purge),
            *console,
            *self._routes,
        ])
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
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
    async def _json_body(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """State-changing requests carry a JSON object, read once and kept on the request."""
        if is_guarded(request.path) and request.method not in SAFE_METHODS:
            try:
                await self._body(request)
            except Refused as refused:
                return _json_error(refused.status, refused.reason)
        return await handler(request)

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self._token and is_guarded(request.path):
            header = request.headers.get("Authorization", "")
            supplied = header[7:] if header.startswith("Bearer ") else ""
            if not hmac.compare_digest(supplied.encode(), self._token.encode()):
                return _json_error(401, "missing or wrong token: send "
                                        "'Authorization: Bearer <DASHBOARD_TOKEN>'")
        return await handler(request)

    @web.middleware
    async def _audit(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Every action is logged with who did it; a successful one is answered with the new
        state (`state`, see CONSOLE_ACTIONS), so the page shows the result without asking."""
        response = await handler(request)
        if request.method in SAFE_METHODS or not is_guarded(request.path):
            return response
        operator = self._operator(request)
        log.info("dashboard %s %s by the %s from %s: %s", request.method, request.path,
                 operator.who, operator.remote, response.status)
        if response.status < 400 and request.path.startswith(("/api/dlq/", "/api/cron/")):
            body = await self._body(request)  # kept by aiohttp: read once already
            target = body.get("id") or body.get("name") or \
                ", ".join(map(str, body.get("ids") or [])) or \
                ("all" if request.path.endswith("/purge") else "")
            self._hub.publish("operator.action", {
                "action": request.path.removeprefix("/api/").replace("/", "."),
                "target": str(target)[:200], "by": operator.who})
        wants_state = request.path in CONSOLE_ACTIONS or \
            request.headers.get(STATE_HEADER) == "1"  # the CLI's answers stay as they were
        if not wants_state or response.status >= 400 or \
                not isinstance(response, web.Response) or response.content_type != \
                "application/json" or response.body is None:
            return response
        try:
            answer = json.loads(bytes(response.body))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return response
        if not isinstance(answer, dict):
            return response
        return web.json_response({**answer, "state": await self._full_state()},
                                 status=response.status)

    def _operator(self, request: web.Request) -> Operator:
        return Operator.of(request, bool(self._token))

    def _action(self, handler: ActionHandler) -> Callable[[web.Request],
                                                         Awaitable[web.Response]]:
        async def route(request: web.Request) -> web.Response:
            try:
                answer = await handler(await self._body(request), self._operator(request))
            except ActionError as exc:
                return _json_error(exc.status, str(exc))
            return web.json_response(answer)
        return route

    async def _full_state(self) -> dict[str, Any]:
        state = await self._state()
        if self._console is not None and (state.get("backend") or {}).get("connected", True):
            try:  # runs, tasks, cron, decisions: in Redis with that backend
                state.update(await self._console.snapshot())
            except Exception as exc:  # the summary still answers, and says why
                if not self._sections_failing:  # once per outage, not per page refresh
                    log.warning("dashboard: the page's sections could not be read (%s: %s)",
                                type(exc).__name__, exc)
                self._sections_failing = True
            else:
                self._sections_failing = False
            _no_model_answers(state)
        return state

    async def _page(self, request: web.Request) -> web.Response:
        html = resources.files("soulflow.dashboard").joinpath("static/index.html").read_text(
            encoding="utf-8")
        return web.Response(text=html, content_type="text/html")

    async def _asset(self, request: web.Request) -> web.Response:
        """One of the page's own files (a fixed list: no path from the request is opened)."""
        name = request.path.rsplit("/", 1)[-1]
        if name not in STATIC_ASSETS:
            raise web.HTTPNotFound()
        text = resources.files("soulflow.dashboard").joinpath(f"static/{name}").read_text(
            encoding="utf-8")
        suffix = name[name.rfind("."):]
        return web.Response(text=text, content_type=ASSET_TYPES.get(suffix, "text/plain"),
                            headers={"Cache-Control": "no-cache"})

    async def _metrics(self, request: web.Request) -> web.Response:
        assert self._runtime is not None
        text = render_metrics(self._runtime, sse_clients=self._hub.subscriber_count,
                              connections=self.gate.counts)
        return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})

    async def _healthz(self, request: web.Request) -> web.Response:
        ready = self._ready()
        return web.json_response({"ok": ready, "status": "ok" if ready else "starting"},
                                 status=200 if ready else 503)

    async def _api_state(self, request: web.Request) -> web.Response:
        await self._bus.fresh_stats()  # the queue counts as of now, not of the last second
        return web.json_response(await self._full_state())

    async def _api_events(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        subscription = self._hub.subscribe()  # before the replay: nothing falls in between
        try:
            replay = self._hub.replay_after(request.headers.get("Last-Event-ID"))
            # tell the browser to come back after 2 s when the connection drops
            hello = {"kind": "hello", "at": time.time(),
                     "data": {"stream": self._hub.stream, "gap": replay.gap}}
            await response.write(f"retry: 2000\nevent: hello\ndata: {json.dumps(hello)}\n\n"
                                 .encode())
            sent = 0
            for past in replay.events:
                await response.write(self._sse(past))
                sent = max(sent, int(past["id"]))
            while True:
                event = await subscription.next(SSE_KEEPALIVE_S)
                if event is not None and event.id <= sent:
                    continue  # already sent in the replay
                payload = b": keepalive\n\n" if event is None else \
                    self._sse(self._hub.export(event))
                await response.write(payload)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            subscription.close()
        return response

    def _sse(self, event: dict[str, Any]) -> bytes:
        data = json.dumps(event, ensure_ascii=False)
        return (f"id: {self._hub.event_id(event)}\nevent: {event['kind']}\n"
                f"data: {data}\n\n").encode()

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
        # a streamed reply reads as one message (channels/local/edits.py); `last_seq` is the
        # cursor for the next read, which the last message shown may be older than
        last_seq = int(messages[-1]["seq"]) if messages else after
        messages = collapse_edits(messages)
        if self._runtime is not None:  # a credential typed in the chat is not shown back
            messages = self._runtime.redactor.redact_obj(messages)
        return web.json_response({"ok": True, "chat_id": chat_id, "messages": messages,
                                  "last_seq": last_seq})

    # -- DLQ -----------------------------------------------------------------------------

    async def _api_dlq_list(self, request: web.Request) -> web.Response:
        if request.query.get("inbound") in ("1", "true"):  # quarantined inbound messages
            return web.json_response({"ok": True, "entries": [
                e.to_dict() for e in await self._bus.inbound_dlq.entries()]})
        return web.json_response({"ok": True, "entries": [
            e.to_dict() for e in await self._bus.dlq.entries()]})

    async def _api_dlq_replay(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        ids = body.get("ids")
        if ids is not None and not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
            return _json_error(400, "'ids' must be a list of message ids")
        replayed = await self._bus.replay_dlq(ids)
        await self._bus.refresh_stats()  # the page's counts show it at once
        return web.json_response({"ok": True, "replayed": replayed})

    async def _api_dlq_purge(self, request: web.Request) -> web.Response:
        """All outbound dead letters, the given ids, or (`inbound: true`) the inbound ones."""
        body = await self._body(request)
        ids = body.get("ids")
        if ids is not None and not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
            return _json_error(400, "'ids' must be a list of message ids")
        if body.get("inbound") is True:
            purged = await self._bus.inbound_dlq.purge()
        else:
            purged = await (self._bus.dlq.purge() if ids is None else self._bus.dlq.remove(ids))
        await self._bus.refresh_stats()  # the page's counts show it at once
        return web.json_response({"ok": True, "purged": purged})

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        self.gate.limits = self._fitted_limits()
        self._runner = web.AppRunner(self.build_app(), access_log=None,
                                     handle_signals=False, shutdown_timeout=2.0)
        await self._runner.setup()
        self.release_reservation()
        try:
            self._listener = await listen(self._runner, self.host, self.port, self.gate)
        except OSError as exc:
            await self._runner.cleanup()
            self._runner = None
            raise cannot_listen(self.host, self.port, exc) from None
        sockets = self._listener.sockets
        self.bound_port = int(sockets[0].getsockname()[1]) if sockets else self.port
        log.info("dashboard on http://%s:%s/", self.host, self.bound_port)

    def _fitted_limits(self) -> ConnectionLimits:
        """The connection caps, clamped so that they and the connections in flight stay
        within half the open-files limit (said in the log when they are)."""
        open_files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if open_files == resource.RLIM_INFINITY:
            open_files = 1 << 30
        limits, notes = self.gate.limits.within(open_files, IN_FLIGHT)
        for note in notes:
            log.warning("dashboard: %s", note)
        log.info("dashboard connections: at most %d open, %d per address; a request head "
                 "within %g s, idle keep-alive %g s (open-files limit %d)", limits.max_open,
                 limits.max_per_address, limits.header_timeout_s, limits.idle_timeout_s,
                 open_files)
        return limits

    def release_reservation(self) -> None:
        if self._reservation is not None:
            self._reservation.release()
            self._reservation = None

    async def stop(self) -> None:
        self.release_reservation()  # a start that never came (the runtime failed first)
        if self._actions is not None:
            await self._actions.stop()
        if self._listener is not None:
            self._listener.close()  # no new connections; the runner closes the open ones
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._listener is not None:
            await self._listener.wait_closed()
            self._listener = None
        self.gate.close()
