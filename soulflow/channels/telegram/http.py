"""python-telegram-bot's networking on aiohttp, and the mapping of PTB errors to `SendError`.

Why not PTB's default `HTTPXRequest`. It sends through httpx, whose connection pool (httpcore
1.0.9, the last release; httpx itself gets no new releases) leaks a slot whenever a request is
cancelled after the pool assigned it a *new* connection but before that connection connected:
the `AsyncHTTPConnection` stays in the pool neither idle, closed nor expired, so no request owns
it and nothing ever reclaims it (encode/httpcore#1093, #658, #830; fixes #986/#1094/#1099 are
unmerged). SoulFlow cancels in-flight calls routinely -- a typing indicator ends when the reply
is ready, a long poll ends on stop -- so under load the pool filled up with such orphans and
every later call failed with "Pool timeout: All connections in the connection pool are
occupied" while the server received nothing: the bot went mute. Shielding calls from
cancellation would only narrow the window (a pool timeout raised at the same point leaks the
same way), so `AiohttpRequest` replaces the transport instead. aiohttp's connector releases a
slot on every exit path (cancellation while waiting for a slot, while connecting or while
reading), and it is the client the Slack and Discord SDKs already use. PTB documents
`BaseRequest` as the extension point for exactly this.
"""

from __future__ import annotations

import datetime as dtm
import warnings
from collections.abc import Callable
from typing import Any

import aiohttp
from telegram._utils.defaultvalue import DefaultValue  # what PTB's own HTTPXRequest checks
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.request import BaseRequest, RequestData
from telegram.warnings import PTBDeprecationWarning

from soulflow.channels.base import ChannelError
from soulflow.contracts import SendError


class AiohttpRequest(BaseRequest):
    """A PTB request object with its own aiohttp session and a bounded connection pool.

    Timeouts follow PTB's meaning: `pool_timeout` + `connect_timeout` bound getting a
    connection (aiohttp's `connect`), `connect_timeout` the TCP/TLS handshake, `read_timeout`
    each wait for response bytes; for an upload the sum of all four bounds the whole call
    (aiohttp has no write timeout, and a server that stops reading must not hang a send).
    """

    def __init__(self, *, pool_size: int, connect_timeout: float = 10.0,
                 read_timeout: float = 30.0, write_timeout: float = 30.0,
                 pool_timeout: float = 10.0) -> None:
        self.pool_size = pool_size
        self._timeouts = {"connect": connect_timeout, "read": read_timeout,
                          "write": write_timeout, "pool": pool_timeout}
        self._session: aiohttp.ClientSession | None = None

    @property
    def read_timeout(self) -> float | None:
        return self._timeouts["read"]

    async def initialize(self) -> None:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self.pool_size, limit_per_host=0)
            self._session = aiohttp.ClientSession(
                connector=connector, headers={"User-Agent": self.USER_AGENT}, trust_env=True)

    async def shutdown(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    def _timeout(self, read: Any, write: Any, connect: Any, pool: Any, *,
                 upload: bool) -> aiohttp.ClientTimeout:
        def pick(value: Any, name: str) -> float | None:
            chosen = self._timeouts[name] if _is_default(value) else value
            return None if chosen is None else float(chosen)

        read_s, write_s = pick(read, "read"), pick(write, "write")
        connect_s, pool_s = pick(connect, "connect"), pick(pool, "pool")
        parts = (read_s, write_s, connect_s, pool_s)
        # aiohttp has no write timeout: an upload bounds the whole call instead; a download
        # has no total (a large file may take long), each read stays bounded
        total = None if not upload or None in parts else sum(p for p in parts if p is not None)
        acquire = None if connect_s is None or pool_s is None else connect_s + pool_s
        return aiohttp.ClientTimeout(total=total, connect=acquire, sock_connect=connect_s,
                                     sock_read=read_s)

    async def do_request(self, url: str, method: str, request_data: RequestData | None = None,
                         read_timeout: Any = BaseRequest.DEFAULT_NONE,
                         write_timeout: Any = BaseRequest.DEFAULT_NONE,
                         connect_timeout: Any = BaseRequest.DEFAULT_NONE,
                         pool_timeout: Any = BaseRequest.DEFAULT_NONE) -> tuple[int, bytes]:
        session = self._session
        if session is None or session.closed:
            raise RuntimeError("This AiohttpRequest is not initialized!")
        timeout = self._timeout(read_timeout, write_timeout, connect_timeout, pool_timeout,
                                upload=bool(request_data and request_data.multipart_data))
        try:
            async with session.request(method, url, data=_body(request_data),
                                       timeout=timeout) as response:
                return response.status, await response.read()
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise TimedOut(f"Timed out ({type(exc).__name__})") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise NetworkError(f"aiohttp.{type(exc).__name__}: {exc}") from exc


def _is_default(value: Any) -> bool:
    return isinstance(value, DefaultValue)


def _body(request_data: RequestData | None) -> aiohttp.FormData | dict[str, str] | None:
    """Form fields like PTB's own request (url-encoded, or multipart when files go along)."""
    if request_data is None:
        return None
    fields = request_data.json_parameters
    files = request_data.multipart_data
    if not files:
        return fields or None
    form = aiohttp.FormData()
    for name, value in fields.items():
        form.add_field(name, value)
    for name, (filename, content, mime_type) in files.items():
        form.add_field(name, content, filename=filename, content_type=mime_type)
    return form


TOKEN_REJECTED = ("Telegram rejected TELEGRAM_BOT_TOKEN ({reason}); create a token with "
                  "@BotFather (/newbot or /token) and set TELEGRAM_BOT_TOKEN to it.")


class TelegramStartError(ChannelError):
    """The channel cannot start: the token is wrong or the Bot API is unreachable."""


def start_error(exc: TelegramError, api_url: str,
                redact: Callable[[BaseException], str]) -> TelegramStartError:
    """One sentence for a failed getMe/deleteWebhook; never the token (PTB's message quotes
    it, so an InvalidToken is described, not repeated)."""
    if isinstance(exc, InvalidToken):
        said = str(exc.__cause__ or exc).lower()  # PTB wraps the server's answer
        reason = "401 Unauthorized" if "unauthorized" in said else "404 Not Found"
        return TelegramStartError(TOKEN_REJECTED.format(reason=reason))
    return TelegramStartError(f"Cannot reach the Telegram Bot API at {api_url} "
                              f"({redact(exc)}); check the network.")


def retry_seconds(exc: RetryAfter) -> float:
    """`retry_after` in seconds (PTB 22 returns int or timedelta depending on PTB_TIMEDELTA)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, dtm.timedelta) else float(value)


def send_error(exc: TelegramError, redact: Callable[[BaseException], str]) -> SendError:
    """Map PTB errors: flood control and network trouble retry, refusals do not."""
    if isinstance(exc, RetryAfter):  # before str(exc), which reads the deprecated attribute
        seconds = retry_seconds(exc)
        return SendError(f"Telegram rate-limited the bot; retry after {seconds:g} s.",
                         retry_after=seconds)
    detail = redact(exc)
    if isinstance(exc, ChatMigrated):
        return SendError(f"Telegram moved this group to supergroup {exc.new_chat_id}; "
                         "send there instead.", permanent=True)
    if isinstance(exc, Forbidden):
        return SendError(f"Telegram refused the message ({detail}): the bot is blocked, "
                         "was removed from the chat or lacks the right to post.",
                         permanent=True)
    if isinstance(exc, InvalidToken):
        return SendError(f"Telegram rejected the bot token ({detail}).", permanent=True)
    if isinstance(exc, BadRequest):  # "chat not found", bad ids, rejected content
        return SendError(f"Telegram rejected the request: {detail}.", permanent=True)
    if isinstance(exc, TimedOut):
        return SendError(f"Telegram did not answer in time ({detail}).")
    return SendError(f"Could not reach Telegram: {detail}.")

