"""The Telegram channel: long polling with python-telegram-bot's `Bot` (no `Application`).

The reader (channels/reader.py) owns the loop, so this adapter only wraps single API calls:
`read()` is one `getUpdates` long poll, `commit()` persists the update offset once the batch
is journaled, and `send()` turns Markdown into Telegram HTML. Updates are parsed one by one,
so a single malformed update is skipped with a warning instead of losing (or wedging) the
whole batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import PurePosixPath
from typing import Any, TypeVar

from telegram import Bot, ReactionTypeEmoji
from telegram.constants import ChatAction, ParseMode
from telegram.error import BadRequest, Conflict, InvalidToken, RetryAfter, TelegramError

from soulflow.bus.pacing import SendBudget
from soulflow.channels.base import (
    BEST_EFFORT_CONNECTIONS,
    AttachmentFolder,
    ChannelAdapter,
    ChannelError,
    ChannelLimits,
)
from soulflow.channels.files import safe_filename
from soulflow.channels.normalize import scrub_surrogates
from soulflow.channels.poison import poison_message
from soulflow.channels.state import ChannelState
from soulflow.channels.telegram.format import (
    UpdateParser,
    chat_ref,
    int_or_none,
    markdown_to_telegram_html,
    megabytes,
    send_options,
    utf16_length,
)
from soulflow.channels.telegram.http import (
    TOKEN_REJECTED,
    AiohttpRequest,
    TelegramStartError,
    retry_seconds,
    send_error,
    start_error,
)
from soulflow.contracts import Attachment, InboundMessage, OutboundMessage, SendError, SendResult

log = logging.getLogger(__name__)

T = TypeVar("T")
ALLOWED_UPDATES = ("message", "message_reaction")
_BATCH_LIMIT = 100  # getUpdates maximum; a full batch means more backlog is waiting
_POLL_READ_MARGIN_S = 10.0  # the HTTP read timeout must outlast the server-side long poll
_MAX_CAPTION = 1024
_REMEMBERED_SENT = 2048
# editMessageText answers (lower-cased): the text is already there; the message is gone (a
# user deleted it) or can no longer be edited
_NOT_MODIFIED = "message is not modified"
_CANNOT_EDIT = ("message to edit not found", "message can't be edited")
#: the FAQ's "not more than 20 messages per minute" in a group, edits counted as messages
GROUP_BUDGET = SendBudget(20, 60.0)


class _Stopped(ChannelError):
    """The adapter was stopped while waiting."""


def _check_size(name: str, size: int | None, limit: int) -> None:
    if size is not None and size > limit:
        raise OSError(f"{name} is {megabytes(size)}; the limit is {megabytes(limit)}")


def _target(message_id: str, action: str) -> int:
    """The numeric id of a message to react to or edit; anything else can never succeed, so
    it is a permanent send error (no retry)."""
    target = int_or_none(message_id)
    if target is None:
        raise SendError(f"Cannot {action} {message_id!r}: it is not a Telegram message id.",
                        permanent=True)
    return target


class TelegramChannel(ChannelAdapter):
    name = "telegram"

    def __init__(self, *, token: str, state: ChannelState,
                 api_url: str = "https://api.telegram.org", poll_timeout_s: int = 25,
                 max_download_bytes: int = 20 * 2**20, send_interval_s: float = 1.0,
                 retry_delay_s: float = 1.0, feedback_timeout_s: float = 5.0) -> None:
        # Telegram counts a message's 4,096 in UTF-16 code units, not characters
        self.limits = ChannelLimits(max_text=4096, chunk_size=4000,
                                    file_fallback_threshold=14_000,
                                    send_interval_s=send_interval_s, measure=utf16_length)
        self.state = state
        self.api_url = api_url.rstrip("/")
        self.poll_timeout_s = poll_timeout_s
        self.max_download_bytes = max_download_bytes
        self.retry_delay_s = retry_delay_s
        self.feedback_timeout_s = feedback_timeout_s
        self._token = token
        self._bot: Bot | None = None
        self._feedback_bot: Bot | None = None
        self._feedback_request: AiohttpRequest | None = None
        self._parser = UpdateParser(bot_id=0, bot_username="")
        self._stopping = asyncio.Event()
        self._offset: int | None = None  # next update to fetch (in memory, ahead of state)
        self._priming = False
        self._batch_end: dict[str, int] = {}  # message key -> offset after its batch
        self._sent: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._poll_failing = False
        self._markup_warned = False

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Check the token (getMe), then start reading (`start_reading`) unless the account
        is shared, where the reader does that on the node that leads it.

        Three connection pools, so no kind of call can starve another: replies and downloads,
        the long poll, and best-effort feedback (typing, read-acks) on a small pool of its own
        with short timeouts. All run on aiohttp (see `http.py` for why not httpx)."""
        await self._open_then_read(self._open_sending())

    async def _open_sending(self) -> None:
        """getMe on the reply bot, then the feedback bot and the update parser."""
        try:
            bot = Bot(self._token, base_url=f"{self.api_url}/bot",
                      base_file_url=f"{self.api_url}/file/bot",
                      request=AiohttpRequest(pool_size=16),
                      get_updates_request=AiohttpRequest(
                          pool_size=1, write_timeout=10.0,
                          read_timeout=self.poll_timeout_s + _POLL_READ_MARGIN_S))
        except InvalidToken:
            raise TelegramStartError(TOKEN_REJECTED.format(reason="it is empty")) from None
        try:
            await bot.initialize()
        except TelegramError as exc:
            await bot.shutdown()
            raise self._start_error(exc) from None
        self._bot = bot
        await self._start_feedback_bot()
        self._parser = UpdateParser(bot_id=bot.id, bot_username=bot.username, bot=bot,
                                    sent=self._sent.keys(), provider=self.name)
        log.info("telegram: connected as @%s", bot.username)

    async def start_reading(self) -> None:
        """Load the update offset and clear any webhook, which would block long polling."""
        bot = self._require_bot()
        try:
            await bot.delete_webhook(drop_pending_updates=False)
        except TelegramError as exc:
            raise self._start_error(exc) from None
        await self.state.load()
        stored = self.state.get("offset")
        self._offset = stored if isinstance(stored, int) else None
        self._priming = self._offset is None
        self._batch_end.clear()
        self._stopping.clear()

    async def stop_reading(self) -> None:
        """End an in-flight long poll at once and store the offset (while the lease holds)."""
        self._stopping.set()
        await self.state.drain()
        await self.state.close()

    def _start_error(self, exc: TelegramError) -> TelegramStartError:
        return start_error(exc, self.api_url, self._redact)

    async def _start_feedback_bot(self) -> None:
        """A second `Bot` for best-effort calls, never retried and bounded by short timeouts.
        Only its request is initialised: these calls need no getMe."""
        limit = self.feedback_timeout_s
        request = AiohttpRequest(pool_size=BEST_EFFORT_CONNECTIONS, connect_timeout=limit,
                                 read_timeout=limit, write_timeout=limit, pool_timeout=1.0)
        await request.initialize()
        self._feedback_request = request
        self._feedback_bot = Bot(self._token, base_url=f"{self.api_url}/bot",
                                 base_file_url=f"{self.api_url}/file/bot", request=request,
                                 get_updates_request=request)

    async def stop(self) -> None:
        await self.stop_reading()  # the offset stored before we say stopped
        bot, self._bot = self._bot, None
        request, self._feedback_request, self._feedback_bot = self._feedback_request, None, None
        if bot is not None:
            await bot.shutdown()
        if request is not None:
            await request.shutdown()

    def _require_bot(self) -> Bot:
        if self._bot is None:
            raise SendError("the Telegram channel is not started")
        return self._bot

    def _require_feedback_bot(self) -> Bot:
        if self._feedback_bot is None:
            raise SendError("the Telegram channel is not started")
        return self._feedback_bot

    # -- reading -----------------------------------------------------------------------

    async def read(self) -> list[InboundMessage]:
        """One getUpdates long poll. The very first read ever (no stored offset) is a short
        poll whose backlog comes back as `priming`: history, recorded but never answered."""
        if self._stopping.is_set() or self._bot is None:
            await asyncio.sleep(self.retry_delay_s)  # a caller looping after stop() must not spin
            return []
        timeout = 0 if self._priming else self.poll_timeout_s
        try:
            raw = await self._until_stopped(self._fetch(self._bot, timeout))
        except _Stopped:
            return []
        except TelegramError as exc:
            if not self._stopping.is_set():  # stop() closing the connection is no outage
                await self._after_poll_error(exc)
            return []
        if self._poll_failing:
            log.info("telegram: polling works again")
            self._poll_failing = False
        self.read_error = None
        return await self._read_batch(raw)

    async def _fetch(self, bot: Bot, timeout: int) -> Any:
        """Raw getUpdates JSON. `Bot.get_updates` parses the whole batch in one go, so one
        malformed update would make it raise and hide its update_id; `_post` (PTB-internal,
        but it picks the dedicated polling request object) returns the plain list."""
        data: dict[str, Any] = {"timeout": timeout, "limit": _BATCH_LIMIT,
                                "allowed_updates": list(ALLOWED_UPDATES)}
        if self._offset is not None:
            data["offset"] = self._offset
        return await bot._post("getUpdates", data, read_timeout=timeout + _POLL_READ_MARGIN_S)

    async def _after_poll_error(self, exc: TelegramError) -> None:
        """Log once per outage and wait, so a dead network or a rival poller is not hammered."""
        delay = self.retry_delay_s * (2 if self._poll_failing else 1)
        if isinstance(exc, RetryAfter):
            delay, problem = retry_seconds(exc), "Telegram asked the bot to slow down"
        elif isinstance(exc, InvalidToken):
            delay, problem = max(delay, 30.0), "Telegram rejected the bot token"
        elif isinstance(exc, Conflict):
            problem = "another getUpdates poller or a webhook is using this bot token"
        else:
            problem = "cannot reach Telegram"
        level = logging.DEBUG if self._poll_failing else logging.WARNING
        log.log(level, "telegram: polling failed, %s (%s); retrying in %.1f s", problem,
                self._redact(exc), delay)
        self._poll_failing = True
        self.read_error = f"polling failed, {problem} ({self._redact(exc)})"
        await self._sleep(delay)

    async def _read_batch(self, raw: Any) -> list[InboundMessage]:
        if not isinstance(raw, list):
            log.warning("telegram: getUpdates returned %s instead of a list; ignored",
                        type(raw).__name__)
            return []
        ids = [u["update_id"] for u in raw if isinstance(u, dict)
               and isinstance(u.get("update_id"), int) and not isinstance(u["update_id"], bool)]
        priming, self._priming = self._priming, self._priming and len(raw) >= _BATCH_LIMIT
        if raw and not ids:  # nothing to advance the offset with: avoid a hot loop
            log.warning("telegram: a batch of %d updates has no update_id; waiting", len(raw))
            await self._sleep(self.retry_delay_s)
            return []
        messages = [m for m in map(self._convert_safely, raw) if m is not None]
        if priming:
            # history is never answered, so its position may be saved at once; otherwise a
            # quiet first start would leave no offset and the next start would prime again,
            # swallowing messages sent in between
            self.state.set("offset", max(max(ids) + 1 if ids else 0, self._offset or 0))
            await self.state.drain()
        if ids:
            end = max(ids) + 1
            self._offset = max(self._offset or 0, end)
            for message in messages:
                message.priming = priming
                self._batch_end[message.key] = end
            while len(self._batch_end) > 10_000:  # never committed (intake crashed): bound it
                self._batch_end.pop(next(iter(self._batch_end)))
        return messages

    def cursor_state(self) -> ChannelState:
        return self.state

    def commit(self, messages: list[InboundMessage]) -> None:
        """Persist the offset past the batch these messages came from (they are journaled)."""
        ends = [self._batch_end.pop(m.key) for m in messages if m.key in self._batch_end]
        stored = self.state.get("offset")
        if ends and (not isinstance(stored, int) or max(ends) > stored):
            self.state.set("offset", max(ends))

    def _convert_safely(self, raw: Any) -> InboundMessage | None:
        try:
            try:
                return self._parser.parse(raw)
            except UnicodeError:  # a lone surrogate ("\ud800" is valid JSON): replace, retry
                return self._parser.parse(scrub_surrogates(raw))
        except Exception as exc:  # a broken update must never take the others with it
            update_id = raw.get("update_id") if isinstance(raw, dict) else None
            log.warning("telegram: update %s could not be read (%s: %s); quarantined",
                        update_id, type(exc).__name__, str(exc)[:200])
            # recorded in the inbound DLQ by the intake before the offset passes it
            return poison_message(self.name, message_id=f"update-{update_id}", error=exc,
                                  raw=raw)

    @property
    def bot_id(self) -> int:
        return self._parser.bot_id

    @property
    def bot_username(self) -> str:
        return self._parser.bot_username

    # -- sending -----------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> SendResult:
        """One message: the text (split for Telegram's limits before it was stored, see
        `soulflow.channels.splitting`) as HTML, or the file it became; or, for a streamed
        reply (`options.edit_of`), that text edited into the message the bot sent."""
        bot = self._require_bot()
        chat = chat_ref(message.chat_id)
        options = send_options(message)
        try:
            if message.options.edit_of:
                sent = await self._edit_text(bot, chat, message, options)
            elif message.options.as_file:
                sent = await self._send_file(bot, chat, message, options)
            else:
                sent = await self._send_text(bot, chat, message.content, options)
        except TelegramError as exc:
            raise self._send_error(exc) from None
        self._remember_sent(message.chat_id, sent)
        return SendResult(platform_message_ids=[sent])

    async def _send_text(self, bot: Bot, chat: int | str, text: str,
                         options: dict[str, Any]) -> str:
        sent = await self._formatted(
            lambda body, **how: bot.send_message(chat, body, **options, **how), text)
        return str(sent.message_id)

    async def _edit_text(self, bot: Bot, chat: int | str, message: OutboundMessage,
                         options: dict[str, Any]) -> str:
        """editMessageText of `edit_of`, formatted as a send is, on the reply bot (not the
        feedback bot that `edit` uses): the dispatcher retries it and paces it with the
        chat's sends, which is what Telegram's flood control counts it as. "Not modified"
        means the text is there already. A message the bot can no longer edit (a user
        deleted it) gets the text as a new message, whose id is returned: the final text of
        a reply is never lost to an edit."""
        edit_of = message.options.edit_of
        if message.options.as_file:
            raise SendError("a reply sent as a file cannot edit a message", permanent=True)
        target = _target(edit_of, "edit")
        try:
            await self._formatted(lambda body, **how: bot.edit_message_text(
                body, chat_id=chat, message_id=target, **how), message.content)
        except BadRequest as exc:
            said = exc.message.lower()
            if _NOT_MODIFIED in said:
                return edit_of
            if not any(gone in said for gone in _CANNOT_EDIT):
                raise
            log.info("telegram: cannot edit message %s in %s (%s); sending the text as a "
                     "new message", edit_of, message.chat_id, exc.message)
            return await self._send_text(bot, chat, message.content, options)
        return edit_of

    async def _formatted(self, post: Callable[..., Awaitable[T]], text: str) -> T:
        """`post(body, **how)` with the text as Telegram HTML, or as plain text when
        Telegram cannot parse the HTML (a converter bug must not lose the reply)."""
        try:
            return await post(markdown_to_telegram_html(text), parse_mode=ParseMode.HTML)
        except BadRequest as exc:
            if "can't parse entities" not in exc.message.lower():
                raise
            level = logging.DEBUG if self._markup_warned else logging.WARNING
            log.log(level, "telegram: formatted text rejected (%s); sent as plain text", exc)
            self._markup_warned = True
            return await post(text)

    async def _send_file(self, bot: Bot, chat: int | str, message: OutboundMessage,
                         options: dict[str, Any]) -> str:
        filename = message.options.filename or "reply.txt"
        note = message.options.note[:_MAX_CAPTION]
        sent = await bot.send_document(chat, message.content.encode("utf-8"), filename=filename,
                                       caption=note or None, **options)
        return str(sent.message_id)

    async def set_typing(self, chat_id: str, on: bool) -> None:
        """Telegram's indicator lasts ~5 s and cannot be cleared, so `on=False` is a no-op."""
        if not on:
            return
        await self._call(self._require_feedback_bot().send_chat_action(chat_ref(chat_id),
                                                                       ChatAction.TYPING))

    async def add_reaction(self, chat_id: str, message_id: str, emoji: str) -> None:
        target = _target(message_id, "react to")
        await self._call(self._require_feedback_bot().set_message_reaction(
            chat_ref(chat_id), target, [ReactionTypeEmoji(emoji)]))  # type: ignore[arg-type]

    can_edit = True
    can_stream = True  # send() edits `options.edit_of` on the reply client

    def chat_budget(self, chat_id: str) -> SendBudget | None:
        """Telegram's FAQ: "not more than 20 messages per minute" in a group (a negative chat
        id), and flood control counts edits as messages."""
        return GROUP_BUDGET if chat_id.startswith("-") else None

    async def edit(self, chat_id: str, message_id: str, text: str) -> None:
        """editMessageText (plain text) on the feedback bot (best effort, like reactions)."""
        target = _target(message_id, "edit")
        await self._call(self._require_feedback_bot().edit_message_text(
            scrub_surrogates(text)[:self.limits.max_text], chat_id=chat_ref(chat_id),
            message_id=target))

    async def _call(self, call: Awaitable[T]) -> T:
        try:
            return await call
        except TelegramError as exc:
            raise self._send_error(exc) from None

    def _send_error(self, exc: TelegramError) -> SendError:
        return send_error(exc, self._redact)

    def _remember_sent(self, chat_id: str, message_id: str) -> None:
        """Recent bot messages, so a reaction to one of them counts as addressed to us."""
        self._sent[(chat_id, message_id)] = None
        while len(self._sent) > _REMEMBERED_SENT:
            self._sent.popitem(last=False)

    # -- files -------------------------------------------------------------------------

    async def download(self, attachment: Attachment, folder: AttachmentFolder) -> PurePosixPath:
        """Fetch a user's file into the chat's `folder`: its size checked before, during (the
        Bot API's `file_size`) and after the download, stored under a sanitised name prefixed
        with a hash of the file id, so two files of the same name never share one. OSError
        with the reason when it cannot be had."""
        if not attachment.file_id:
            raise OSError(f"{attachment.name} has no Telegram file id to download")
        limit = self.max_download_bytes
        _check_size(attachment.name, attachment.size, limit)
        try:
            file = await self._require_bot().get_file(attachment.file_id)
            _check_size(attachment.name, file.file_size, limit)
            data = bytes(await file.download_as_bytearray())
        except (TelegramError, SendError) as exc:
            raise OSError(f"Telegram could not deliver {attachment.name}: "
                          f"{self._redact(exc)}") from None
        _check_size(attachment.name, len(data), limit)
        tag = hashlib.sha256(attachment.file_id.encode()).hexdigest()[:12]
        return await folder.save(safe_filename(attachment.name, tag), data)

    # -- helpers -----------------------------------------------------------------------

    def _redact(self, exc: BaseException) -> str:
        text = str(exc) or type(exc).__name__
        return text.replace(self._token, "<token>") if self._token else text

    async def _sleep(self, seconds: float) -> None:
        """Wait, but wake at once when the adapter is stopped."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _until_stopped(self, work: Awaitable[T]) -> T:
        """Await `work`, cancelling it if `stop()` is called first (raises `_Stopped`)."""
        task = asyncio.ensure_future(work)
        stopped = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            pending = [t for t in (task, stopped) if not t.done()]
            for waiting in pending:
                waiting.cancel()
            if pending:
                await asyncio.wait(pending)
        if self._stopping.is_set() or task.cancelled():
            raise _Stopped
        return task.result()

