"""Loopback fake of the Slack Web API + Socket Mode, speaking the real wire protocol.

Point slack_sdk at it with ``AsyncWebClient(token=BOT_TOKEN, base_url=fake.base_url)``
(``base_url`` ends with ``/api/`` as slack_sdk requires). Socket Mode works through
``apps.connections.open``, which returns ``ws://127.0.0.1:<port>/socket-mode/link/...``.
Run standalone with ``python -m tests.fakes.slack_api --port 0`` (prints ``READY <url>``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from tests.fakes.loopback_base import MAX_BODY_BYTES, Scheduled, client_port, encode_json
from tests.fakes.loopback_runner import FakeServerThread, Snapshot, run_cli
from tests.fakes.rate_limits import (
    SLACK_LIMITS,
    SLACK_NON_MARKETPLACE_LIMITS,
    PacedFake,
    PacedFakeThread,
    PlatformLimits,
    whole_seconds,
)
from tests.fakes.slack_methods import SlackMethods
from tests.fakes.slack_params import Params, SlackError, bearer_token, read_params

BOT_TOKEN = "xoxb-1111111111-2222222222-fakebottoken"
APP_TOKEN = "xapp-1-A0FAKEAPP1-3333333333-fakeapptoken"
APP_TOKEN_METHODS = frozenset({"apps.connections.open"})
UPLOAD = "upload"  # pseudo-method name for the upload URL in fail_next/delay_next/requests

Handler = Callable[[Params], Awaitable[dict[str, Any]]]

#: Posts a message: paced per channel (about 1/s) and counted as a reply. Every other method
#: with a tier in the limits (SLACK_TIERS: reads, chat.update, reactions) is paced per method.
SEND_METHODS = frozenset({"chat.postMessage"})
#: Feedback a bot may drop under pressure; counted so benches see a flood of them.
BEST_EFFORT_METHODS = frozenset({"reactions.add", "reactions.remove", "chat.update"})

_LOGIN_PAGE = "<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in</body></html>"


class FakeSlack(SlackMethods, PacedFake):
    """Fake Slack server. Test-side API: see :class:`tests.fakes.slack_state.SlackWorld`
    (``post_user_message``, ``add_reaction_event``, ...) plus fault injection and socket
    control below."""

    send_methods = SEND_METHODS
    best_effort_methods = BEST_EFFORT_METHODS

    def __init__(
        self, bot_token: str = BOT_TOKEN, app_token: str = APP_TOKEN, *,
        limits: PlatformLimits = SLACK_LIMITS, **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(**kwargs)
        self.bot_token = bot_token
        self.app_token = app_token
        self._failures: Scheduled[SlackError] = Scheduled()
        self._init_pacing(limits)

    @property
    def base_url(self) -> str:
        """Value for slack_sdk's ``base_url`` (must end with ``/api/``)."""
        return f"{self.url}/api/"

    # -- test-side API: faults & sockets ------------------------------------------------
    def fail_next(
        self,
        method: str,
        error: str = "ratelimited",
        *,
        status: int | None = None,
        retry_after: int | None = None,
        count: int = 1,
    ) -> None:
        """Fail the next ``count`` calls of ``method`` (``"upload"`` = the upload URL).

        ``ratelimited`` (the default) answers HTTP 429 with ``Retry-After`` (default 1 s);
        other errors answer HTTP 200 ``{"ok": false, "error": error}`` unless ``status``.
        """
        if status is None:
            status = 429 if error == "ratelimited" or retry_after is not None else 200
        if status == 429 and retry_after is None:
            retry_after = 1
        self._failures.add(method, SlackError(error, status=status, retry_after=retry_after), count)

    def _pace(self, method: str, params: Params) -> None:
        """chat.postMessage over about 1/s in one channel, or a method over its tier's calls
        per minute (workspace-wide): HTTP 429 ``ratelimited`` with ``Retry-After``."""
        wait = self.limiter.admit_method(method)
        if not wait and method in SEND_METHODS:
            wait = self.limiter.admit(params.text("channel"))
        if wait > 0:
            raise SlackError("ratelimited", status=429, retry_after=whole_seconds(wait))

    def _page_size(self, requested: int) -> int:
        """A read's page: what was asked, at most the limits' ``page_limit``."""
        return self.limiter.page_limit(requested, requested)

    @property
    def connection_count(self) -> int:
        """Socket Mode connections currently open."""
        return len(self.socket.connections)

    @property
    def acks(self) -> list[Any]:
        return self.socket.acks

    @property
    def envelopes(self) -> list[dict[str, Any]]:
        return self.socket.envelopes

    def send_disconnect(self, reason: str = "refresh_requested") -> int:
        """Send ``{"type": "disconnect", "reason": ...}`` to every connected client."""
        return self.socket.send_disconnect(reason)

    async def close_sockets(self) -> int:
        """Close every Socket Mode connection with a close frame (1001)."""
        return await self.socket.close_all()

    def drop_sockets(self) -> int:
        """Abort every Socket Mode TCP connection without a close frame."""
        return self.socket.drop_all()

    # -- HTTP ----------------------------------------------------------------------------
    def _build_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_route("*", "/api/{method}", self._handle_api)
        app.router.add_post("/upload/v1/{ticket}", self._handle_upload)
        app.router.add_get("/files-pri/{team_file}/{name}", self._handle_download)
        app.router.add_get("/socket-mode/link/", self.socket.handle)
        return app

    async def _before_stop(self) -> None:
        await self.socket.shutdown()

    def _authorize(self, method: str, token: str | None) -> None:
        if not token:
            raise SlackError("not_authed")
        if token not in (self.bot_token, self.app_token):
            raise SlackError("invalid_auth")
        if (token == self.app_token) != (method in APP_TOKEN_METHODS):
            raise SlackError("not_allowed_token_type")

    async def _handle_api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        entry = None
        try:
            params = await read_params(request)
            entry = self._record(method, dict(params.values), request.method)
            entry.client_port = client_port(request)
            handler: Handler | None = getattr(self, "m_" + method.replace(".", "_"), None)
            if handler is None:
                raise SlackError("unknown_method", status=404, extra={"req_method": method})
            self._authorize(method, bearer_token(request, params))
            body = await self._paced_call(method, method, params, handler)
        except SlackError as error:
            if error.status == 429:
                self.counters.rate_limited[method] += 1
            if entry is not None:
                entry.status, entry.retry_after = error.status, error.retry_after
            self._notify()
            return error.response()
        entry.status = 200
        self._notify()
        return web.Response(body=encode_json({"ok": True, **body}),
                            content_type="application/json")

    async def _handle_upload(self, request: web.Request) -> web.StreamResponse:
        """The pre-signed upload URL: raw body or multipart, answers ``OK - <bytes>``."""
        data = await _upload_body(request)
        ticket = request.match_info["ticket"]
        self._record(UPLOAD, {"ticket": ticket, "size": len(data)}, request.method)
        await self._apply_delay(UPLOAD)
        if failure := self._failures.take(UPLOAD):
            status = failure.status if failure.status >= 400 else 500
            return web.Response(status=status, text=f"error: {failure.error}")
        if not self.receive_upload(ticket, data):
            return web.Response(status=404, text="upload url not found")
        return web.Response(text=f"OK - {len(data)}")

    async def _handle_download(self, request: web.Request) -> web.StreamResponse:
        """``url_private``: needs the bot token, else Slack serves its HTML login page."""
        header = request.headers.get("Authorization", "")
        if header != f"Bearer {self.bot_token}":
            return web.Response(text=_LOGIN_PAGE, content_type="text/html")
        file_id = request.match_info["team_file"].partition("-")[2]
        file = self.files.get(file_id)
        if file is None or not file.uploaded:
            return web.Response(status=404, text="file not found")
        return web.Response(body=file.data, content_type=file.mimetype)


async def _upload_body(request: web.Request) -> bytes:
    if request.content_type != "multipart/form-data":
        return await request.read()
    form = await request.post()
    for value in form.values():
        if isinstance(value, web.FileField):
            return value.file.read()
    return b""


class FakeSlackThread(FakeServerThread[FakeSlack], PacedFakeThread):
    """:class:`FakeSlack` on a background thread, with thread-safe test-side methods."""

    messages = Snapshot()
    uploads = Snapshot()
    requests = Snapshot()
    acks = Snapshot()

    def __init__(self, port: int = 0, **kwargs: Any) -> None:
        super().__init__(lambda: FakeSlack(**kwargs), port=port)

    @property
    def base_url(self) -> str:
        return f"{self.url}/api/"

    def post_user_message(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.call(self.fake.post_user_message, *args, **kwargs)

    def add_reaction_event(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.call(self.fake.add_reaction_event, *args, **kwargs)

    def push_event(self, event: dict[str, Any]) -> dict[str, Any] | None:
        return self.call(self.fake.push_event, event)

    def add_channel(self, *args: Any, **kwargs: Any) -> str:
        return self.call(self.fake.add_channel, *args, **kwargs)

    def fail_next(self, *args: Any, **kwargs: Any) -> None:
        self.call(self.fake.fail_next, *args, **kwargs)

    def delay_next(self, *args: Any, **kwargs: Any) -> None:
        self.call(self.fake.delay_next, *args, **kwargs)

    def send_disconnect(self, reason: str = "refresh_requested") -> int:
        return self.call(self.fake.send_disconnect, reason)

    def close_sockets(self) -> int:
        return self.call(self.fake.close_sockets)

    def drop_sockets(self) -> int:
        return self.call(self.fake.drop_sockets)

    def bot_texts(self, channel: str | None = None) -> list[str]:
        return self.call(self.fake.bot_texts, channel)


def main(argv: list[str] | None = None) -> None:
    def configure(parser: Any) -> None:
        parser.add_argument("--bot-token", default=BOT_TOKEN)
        parser.add_argument("--app-token", default=APP_TOKEN)
        parser.add_argument("--no-limits", action="store_true",
                            help="accept every call (no per-channel pacing, no method tiers)")
        parser.add_argument("--non-marketplace", action="store_true",
                            help="the read limits of a new non-Marketplace app (1/min, 15 a page)")

    def limits(args: Any) -> PlatformLimits:
        chosen = SLACK_NON_MARKETPLACE_LIMITS if args.non_marketplace else SLACK_LIMITS
        return chosen.relaxed() if args.no_limits else chosen

    run_cli(
        lambda args: FakeSlack(args.bot_token, args.app_token, limits=limits(args)),
        "Fake Slack Web API + Socket Mode server",
        argv,
        configure,
    )


if __name__ == "__main__":
    main()
