"""Loopback fake of the Telegram Bot API, speaking the real HTTP wire protocol.

Point python-telegram-bot at it with ``base_url=f"{fake.url}/bot"`` and
``base_file_url=f"{fake.url}/file/bot"``. Routes: ``GET|POST /bot<token>/<method>`` and
``GET /file/bot<token>/<file_path>``; the same under ``/i/<tag>/`` for a test that runs
several bot instances on one token and counts each one's polls. Run standalone with
``python -m tests.fakes.telegram_api --port 0`` (prints ``READY <url>``).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.loopback_base import MAX_BODY_BYTES, Scheduled, client_port, encode_json
from tests.fakes.loopback_runner import FakeServerThread, Snapshot, run_cli
from tests.fakes.rate_limits import (
    TELEGRAM_LIMITS,
    PacedFake,
    PacedFakeThread,
    PlatformLimits,
    whole_seconds,
)
from tests.fakes.telegram_methods import TelegramMethods
from tests.fakes.telegram_params import ApiError, Params, read_params

DEFAULT_TOKEN = "123456789:TEST-fake-token_ABCDEFGHIJKLMNOPQRS"

Handler = Callable[[Params], Awaitable[Any]]

#: Methods that post a message: paced by the per-chat and per-bot limits, counted as replies.
SEND_METHODS = frozenset({"sendmessage", "senddocument", "sendphoto"})
#: What the chat's limits pace: its messages, and edits of them (an edit is a message to the
#: chat's flood control; bots are told the same "retry after" for both).
PACED_METHODS = SEND_METHODS | {"editmessagetext"}
#: Feedback a bot may drop under pressure; counted so benches see a flood of them.
BEST_EFFORT_METHODS = frozenset({"sendchataction", "setmessagereaction", "editmessagetext"})


class _DropConnection(Exception):
    """Raised by a long poll that the test asked to drop: the TCP connection is aborted."""


@dataclass
class _Poll:
    """A ``getUpdates`` request currently held open."""

    conflicted: bool = False
    dropped: bool = False


class _BotUrls:
    """PTB's two URLs, derived from ``url``: the same on the fake and on its thread wrapper."""

    url: str

    @property
    def base_url(self) -> str:
        """Value for PTB's ``base_url`` (PTB appends the token)."""
        return f"{self.url}/bot"

    @property
    def base_file_url(self) -> str:
        """Value for PTB's ``base_file_url``."""
        return f"{self.url}/file/bot"


class FakeTelegram(_BotUrls, TelegramMethods, PacedFake):
    """Fake Bot API server. See :class:`tests.fakes.telegram_state.TelegramWorld` for the
    test-side API (``push_message``, ``push_reaction``, ``add_file``, ...)."""

    send_methods = SEND_METHODS
    best_effort_methods = BEST_EFFORT_METHODS

    def __init__(
        self, token: str = DEFAULT_TOKEN, *, limits: PlatformLimits = TELEGRAM_LIMITS,
        **kwargs: Any,
    ) -> None:
        super().__init__(token, **kwargs)
        self._failures: Scheduled[ApiError] = Scheduled()
        self._init_pacing(limits)
        self._polls: list[_Poll] = []
        self._closing = False
        #: 409 "terminated by other getUpdates request" answers a poller actually received
        #: (one whose connection was still open): two bot instances polled at once
        self.conflicts = 0
        #: getUpdates calls per instance tag (`{url}/i/<tag>` as the API URL; "" untagged)
        self.polls_by: Counter[str] = Counter()

    # -- test-side API: faults and polls -----------------------------------------------
    def fail_next(
        self,
        method: str,
        status: int = 429,
        description: str | None = None,
        retry_after: int | None = None,
        count: int = 1,
    ) -> None:
        """Answer the next ``count`` calls of ``method`` with a Bot API error.

        ``retry_after`` adds ``parameters.retry_after`` (what PTB turns into RetryAfter).
        """
        if description is None:
            description = _default_description(status, retry_after)
        parameters = {"retry_after": retry_after} if retry_after is not None else None
        self._failures.add(method.lower(), ApiError(status, description, parameters), count)

    def delay_next(self, method: str, seconds: float, count: int = 1) -> None:
        """Hold the next ``count`` calls of ``method`` for ``seconds`` before answering."""
        super().delay_next(method.lower(), seconds, count)

    def _pace(self, method: str, params: Params) -> None:
        """429 a send or an edit over its chat's budget (1/s; in a group also 20 a minute) or
        the bot's (30/s), as Telegram does."""
        if method not in PACED_METHODS:
            return
        chat = params.get("chat_id")
        wait = self.limiter.admit(str(chat), group=self._is_group(chat))
        if wait > 0:
            seconds = whole_seconds(wait)
            raise ApiError(429, f"Too Many Requests: retry after {seconds}",
                           {"retry_after": seconds})

    def _is_group(self, chat_id: Any) -> bool:
        """A group, supergroup or channel: its registered type, else a negative id (how the
        Bot API numbers them) or an @username (only channels and public groups have one)."""
        try:
            key = int(chat_id)
        except (TypeError, ValueError):
            return chat_id is not None
        chat = self.chats.get(key)
        return chat["type"] != "private" if chat else key < 0

    def stats(self) -> dict[str, Any]:
        """Replies, 429s and best-effort calls (see `PacedFake.stats`), and 409 conflicts."""
        return {**self.counters.snapshot(), "conflicts": self.conflicts}

    @property
    def pending_polls(self) -> int:
        """Number of ``getUpdates`` calls currently held open by long polling."""
        return len(self._polls)

    def drop_long_polls(self) -> int:
        """Abort the TCP connection of every held ``getUpdates``; returns how many."""
        for poll in self._polls:
            poll.dropped = True
        self._notify()
        return len(self._polls)

    # -- HTTP ------------------------------------------------------------------------------
    def _build_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_route("*", "/bot{token}/{method}", self._handle_api)
        # a tagged base URL tells bot instances sharing one token apart (see `polls_by`)
        app.router.add_route("*", "/i/{instance}/bot{token}/{method}", self._handle_api)
        app.router.add_get("/file/bot{token}/{path:.+}", self._handle_file)
        return app

    async def _before_stop(self) -> None:
        self._closing = True
        self._notify()

    def _check_token(self, token: str) -> None:
        """Malformed tokens get 404 like the real server, wrong ones 401."""
        if token == self.token:
            return
        if ":" not in token:
            raise ApiError(404, "Not Found")
        raise ApiError(401, "Unauthorized")

    def _handlers(self) -> dict[str, Handler]:
        names = (
            "getMe", "getUpdates", "sendMessage", "editMessageText", "deleteMessage",
            "sendDocument", "sendPhoto", "sendChatAction", "setMessageReaction", "getFile",
            "setWebhook", "deleteWebhook", "getWebhookInfo", "getChat", "getChatMember",
            "setMyCommands", "getMyCommands", "deleteMyCommands",
        )  # fmt: skip
        return {name.lower(): getattr(self, f"m_{name}") for name in names}

    async def _handle_api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        if method.lower() == "getupdates":
            self.polls_by[request.match_info.get("instance", "")] += 1
        entry = None
        try:
            params = await read_params(request)
            entry = self._record(method, params.record(), request.method)
            entry.client_port = client_port(request)
            self._check_token(request.match_info["token"])
            handler = self._handlers().get(method.lower())
            if handler is None:
                raise ApiError(404, "Not Found")
            result = await self._paced_call(method, method.lower(), params, handler)
        except ApiError as error:
            if error.status == 429:
                self.counters.rate_limited[method] += 1
            if entry is not None:
                entry.status = error.status
                entry.retry_after = (error.parameters or {}).get("retry_after")
            if error.status == 409 and method.lower() == "getupdates" and _connected(request):
                self.conflicts += 1
            return web.json_response(error.body(), status=error.status)
        except _DropConnection:
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)
        entry.status = 200
        self._notify()
        return web.Response(body=encode_json({"ok": True, "result": result}),
                            content_type="application/json")

    async def _handle_file(self, request: web.Request) -> web.StreamResponse:
        try:
            self._check_token(request.match_info["token"])
        except ApiError as error:
            return web.json_response(error.body(), status=error.status)
        path = request.match_info["path"]
        self._record("file", {"file_path": path}, request.method)
        for stored in self.files.values():
            if stored.file_path == path:
                return web.Response(body=stored.data, content_type="application/octet-stream")
        return web.json_response(ApiError(404, "Not Found").body(), status=404)

    # -- long polling ------------------------------------------------------------------
    async def m_getUpdates(self, params: Params) -> list[dict[str, Any]]:
        """Real long polling: held until an update arrives, ``timeout`` passes, another
        ``getUpdates`` supersedes it (409 Conflict) or the test drops it."""
        if self.webhook_url:
            raise ApiError(
                409,
                "Conflict: can't use getUpdates method while webhook is active; "
                "use deleteWebhook to delete the webhook first",
            )
        allowed = params.obj("allowed_updates")
        if allowed is not None:
            self.allowed_updates = frozenset(allowed) or None
        offset = params.integer("offset")
        if offset:
            self._confirm(offset)
        limit = min(max(params.integer("limit") or 100, 1), 100)
        timeout = max(params.number("timeout", 0.0), 0.0)
        for other in self._polls:
            other.conflicted = True
        poll = _Poll()
        self._polls.append(poll)
        self._notify()
        try:
            return await self._hold_poll(poll, limit, timeout)
        finally:
            self._polls.remove(poll)
            self._notify()

    async def _hold_poll(self, poll: _Poll, limit: int, timeout: float) -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            batch = self._collect(limit)
            if batch or self._closing:
                return batch
            if poll.conflicted:
                raise ApiError(
                    409,
                    "Conflict: terminated by other getUpdates request; "
                    "make sure that only one bot instance is running",
                )
            if poll.dropped:
                raise _DropConnection
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            await self._wait_changed(remaining)


def _connected(request: web.Request) -> bool:
    """The client is still there to read the answer (a poller that gave up has closed it)."""
    transport = request.transport
    return transport is not None and not transport.is_closing()


def _default_description(status: int, retry_after: int | None) -> str:
    if status == 429:
        return f"Too Many Requests: retry after {retry_after or 1}"
    return {
        400: "Bad Request",
        401: "Unauthorized",
        403: "Forbidden: bot was blocked by the user",
        404: "Not Found",
        409: "Conflict",
        500: "Internal Server Error",
        502: "Bad Gateway",
    }.get(status, "Error")


class FakeTelegramThread(_BotUrls, FakeServerThread[FakeTelegram], PacedFakeThread):
    """:class:`FakeTelegram` on a background thread, with thread-safe test-side methods.

    ``with FakeTelegramThread() as tg: ...`` — ``tg.url``, ``tg.base_url`` and
    ``tg.base_file_url`` are ready inside the block.
    """

    sent_messages = Snapshot()
    requests = Snapshot()

    def __init__(self, token: str = DEFAULT_TOKEN, port: int = 0, **kwargs: Any) -> None:
        super().__init__(lambda: FakeTelegram(token, **kwargs), port=port)

    def push_message(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.call(self.fake.push_message, *args, **kwargs)

    def push_reaction(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.call(self.fake.push_reaction, *args, **kwargs)

    def push_raw_update(self, update: dict[str, Any]) -> int:
        return self.call(self.fake.push_raw_update, update)

    def add_file(self, *args: Any, **kwargs: Any) -> None:
        self.call(self.fake.add_file, *args, **kwargs)

    def add_chat(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.call(self.fake.add_chat, *args, **kwargs)

    def fail_next(self, *args: Any, **kwargs: Any) -> None:
        self.call(self.fake.fail_next, *args, **kwargs)

    def delay_next(self, *args: Any, **kwargs: Any) -> None:
        self.call(self.fake.delay_next, *args, **kwargs)

    def drop_long_polls(self) -> int:
        return self.call(self.fake.drop_long_polls)

    def conflicts(self) -> int:
        """409 conflicts delivered to a poller (two instances polled at once)."""
        return self.call(lambda: self.fake.conflicts)

    def pending_polls(self) -> int:
        return self.call(lambda: self.fake.pending_polls)

    def polls_by(self) -> dict[str, int]:
        """getUpdates calls per instance tag (see `FakeTelegram.polls_by`)."""
        return self.call(lambda: dict(self.fake.polls_by))

    def sent_texts(self, chat_id: int | str | None = None) -> list[str]:
        return self.call(self.fake.sent_texts, chat_id)


def main(argv: list[str] | None = None) -> None:
    run_cli(
        lambda args: FakeTelegram(
            args.token,
            limits=TELEGRAM_LIMITS.relaxed() if args.no_limits else TELEGRAM_LIMITS,
        ),
        "Fake Telegram Bot API server",
        argv,
        _configure_cli,
    )


def _configure_cli(parser: Any) -> None:
    parser.add_argument("--token", default=DEFAULT_TOKEN)
    parser.add_argument("--no-limits", action="store_true",
                        help="accept every send (no per chat, per group or per bot pacing)")


if __name__ == "__main__":
    main()
