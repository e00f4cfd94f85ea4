"""The Discord channel: discord.py's gateway client for events, its REST client for sends.

Redirection. discord.py keeps its URLs on classes; the adapter changes none of them: its
clients get their own `RoutedHTTPClient` (`http.py`), which sends REST calls to
`api_url`, connects the gateway to `gateway_url` and reads bytes that are not UTF-8 as U+FFFD.

Staying connected. discord.py reconnects and resumes by itself after network drops, but a
malformed event crashes its parser and ends `Client.connect()`. A supervisor task logs that,
throws the client away and connects a fresh one with exponential backoff.

Nothing skipped across restarts and re-identifies. The gateway pushes live events only, and a
new session does not replay what happened before it. `commit()` stores the newest message id
per channel (`last:<channel id>` in the channel state); after every READY the adapter fetches
each known channel's messages after that id (`GET /channels/{id}/messages?after=`, page after
page of `catch_up_limit`). Until a channel is fetched, its live messages wait behind
(`catch_up.py`), so they never move its cursor past what was missed. The inbound journal's
dedupe makes a message fetched twice harmless, so a crash between journal and commit neither
re-answers nor skips. Channels without a cursor are primed with their current last message
id, so old history is never answered.
Limits: reactions made while disconnected are not recovered (Discord keeps no reaction log);
channels without a cursor -- created while the daemon was down, or a DM from someone who never
wrote before -- are not fetched.

Shared accounts (redis backend). Only the node that leads the account opens a gateway session
(a second session would deliver every event twice); every node logs in a REST-only client for
its sends, which the leader also falls back to while its gateway reconnects.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from pathlib import PurePosixPath
from typing import Any

import aiohttp
import discord
import discord.abc
import discord.gateway
import discord.http

from soulflow.channels.base import (
    AttachmentFolder,
    ChannelAdapter,
    ChannelError,
    ChannelLimits,
    drain,
)
from soulflow.channels.discord import format as fmt
from soulflow.channels.discord.catch_up import ChannelCatchUp
from soulflow.channels.discord.feedback import DiscordFeedbackClient
from soulflow.channels.poison import poison_message
from soulflow.channels.state import ChannelState
from soulflow.contracts import Attachment, InboundMessage, OutboundMessage, SendError, SendResult

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://discord.com/api/v10"
_CURSOR = "last:"
_RECENT_KEYS = 5000
# Every new client IDENTIFYs, and Discord allows ~1000 a day: a client that keeps dying right
# after READY must back off too, so the backoff only resets after a connection held a while.
_MAX_BACKOFF_S = 120.0
_STABLE_S = 60.0
_CATCH_UP_TRIES = 4  # fetches of one channel's missed messages before going on without


class DiscordStartError(ChannelError):
    """The adapter could not connect; the message says what the operator should fix."""


class DiscordChannel(ChannelAdapter):
    """One Discord bot: its guild channels, threads and DMs as chats."""

    name = "discord"

    def __init__(self, *, token: str, state: ChannelState, api_url: str = DEFAULT_API_URL,
                 gateway_url: str | None = None, max_download_bytes: int = 20 * 2**20,
                 send_interval_s: float = 1.0, guild_ready_timeout: float = 2.0,
                 fast_identify: bool = False, ready_timeout: float = 30.0,
                 reconnect_delay_s: float = 1.0, catch_up_limit: int = 100,
                 max_ratelimit_timeout: float = 30.0) -> None:
        self.limits = ChannelLimits(max_text=2000, chunk_size=1900, file_fallback_threshold=14_000,
                                    send_interval_s=send_interval_s)
        self.api_url = api_url.rstrip("/")
        self.gateway_url = gateway_url
        self.max_download_bytes = max_download_bytes
        self.fast_identify = fast_identify
        self.ready_timeout = ready_timeout
        self.reconnect_delay_s = reconnect_delay_s
        self.catch_up_limit = catch_up_limit
        self._token = token
        self._state = state
        self._client_options = {"guild_ready_timeout": guild_ready_timeout,
                                "max_ratelimit_timeout": max_ratelimit_timeout}
        self._queue: asyncio.Queue[InboundMessage] = asyncio.Queue()
        self._client: fmt.EventClient | None = None  # the gateway session (reading)
        self._rest: fmt.EventClient | None = None  # sends of a node that does not read
        self._started = False
        self._feedback = DiscordFeedbackClient(self.api_url)
        self._supervisor: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._ready = asyncio.Event()
        self._closing = False
        self._failures = 0
        self._ready_at = 0.0
        # the cursors (newest message id queued per channel), and live messages held behind
        # their channel's catch-up
        self._catch_up_state = ChannelCatchUp(lambda m: self._enqueue(m, live=False))
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._catch_up_lock = asyncio.Lock()

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Log in (a bad token fails here, clearly), connect, and wait for READY. On a shared
        account only the sending side: a REST client that never opens a gateway session
        (the node that leads the account opens one in `start_reading`)."""
        if self._started:
            return
        self._started = True
        await self._open_then_read(self._open_sending())

    async def _open_sending(self) -> None:
        client = await self._login()  # a bad token is reported here, as one sentence
        if self.leadership is not None:
            self._rest = client
        else:
            self._client = client  # the gateway session's client, opened by start_reading
        await self._feedback.start(self._token)

    async def start_reading(self) -> None:
        """Open the gateway session and wait for READY (the baseline of channels without a
        cursor is stored before this returns)."""
        if self._supervisor is not None:
            return
        self._closing, self._failures, self._ready = False, 0, asyncio.Event()
        await self._state.load()
        self._load_cursors()
        try:
            if self._client is None:
                self._client = await self._login()
            self._supervisor = asyncio.create_task(self._supervise(), name="discord:gateway")
            await self._wait_ready(self._supervisor)
            await self._state.drain()
        except BaseException:
            await self.stop_reading()
            raise

    async def stop_reading(self) -> None:
        """Close the gateway session; store the cursors first (while the lease holds)."""
        self._closing = True
        await self._discard_client()
        tasks = [t for t in (self._supervisor, *self._background) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._discard_client()  # a login racing the cancellation
        self._supervisor = None
        # events still queued are read in the next term (the journal drops any that another
        # node took in meanwhile); their channels' cursors stay ahead in memory meanwhile
        await self._state.drain()  # cursors stored before we say stopped
        await self._state.close()

    async def stop(self) -> None:
        await self.stop_reading()
        rest, self._rest = self._rest, None
        if rest is not None:
            try:
                await rest.close()
            except Exception as exc:
                log.debug("closing the Discord REST client failed: %s", exc)
        await self._feedback.stop()
        self._started = False

    async def _login(self) -> fmt.EventClient:
        events = fmt.ClientEvents(self._catch_up_state.session_starting, self._on_ready,
                                  self._on_message, self._on_reaction)
        client = fmt.EventClient(events, api_url=self.api_url, gateway_url=self.gateway_url,
                                 fast_identify=self.fast_identify, **self._client_options)
        try:
            await client.login(self._token)
        except BaseException as exc:
            await client.close()
            if isinstance(exc, discord.LoginFailure):
                raise DiscordStartError(
                    "Discord rejected DISCORD_BOT_TOKEN (401); copy the token again from the "
                    "Developer Portal (Applications > your app > Bot > Reset Token).") from None
            if isinstance(exc, discord.HTTPException | aiohttp.ClientError | OSError
                          | TimeoutError):
                raise DiscordStartError(
                    f"Cannot reach the Discord API at {self.api_url}: {exc}") from exc
            raise
        return client

    async def _wait_ready(self, supervisor: asyncio.Task[None]) -> None:
        ready = asyncio.create_task(self._ready.wait())
        try:
            await asyncio.wait({ready, supervisor}, timeout=self.ready_timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        if self._ready.is_set():
            return
        if supervisor.done() and not supervisor.cancelled() and supervisor.exception():
            error = supervisor.exception()
            assert error is not None
            raise DiscordStartError(fmt.explain_start_failure(error)) from error
        raise DiscordStartError(f"Discord's gateway did not become ready within "
                                f"{self.ready_timeout:.0f}s; check the network.")

    async def _supervise(self) -> None:
        """Keep one gateway connection until stop(); replace the client whenever it dies."""
        while not self._closing:
            try:
                if self._client is None:
                    self._client = await self._login()
                await self._client.connect(reconnect=True)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._closing:
                    return
                if not self._ready.is_set():
                    raise  # start() turns it into a DiscordStartError
                log.error("Discord connection failed (%s: %s); reconnecting with a new client",
                          type(exc).__name__, exc, exc_info=not isinstance(exc, DiscordStartError))
                self.read_error = f"gateway connection failed ({type(exc).__name__}: {exc})"
            else:
                if self._closing:
                    return
                log.warning("Discord gateway connection ended; reconnecting")
            await self._discard_client()
            stable = asyncio.get_running_loop().time() - self._ready_at > _STABLE_S
            self._failures = 1 if stable else self._failures + 1
            await asyncio.sleep(min(_MAX_BACKOFF_S,
                                    self.reconnect_delay_s * 2 ** (self._failures - 1)))

    async def _discard_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.close()
            except Exception as exc:  # closing a broken connection may fail; it is gone anyway
                log.debug("closing the Discord client failed: %s", exc)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("Discord background task %s failed", task.get_name(),
                      exc_info=task.exception())

    # -- inbound -------------------------------------------------------------------------

    def _on_ready(self, client: discord.Client) -> None:
        self.read_error = None
        self._ready_at = asyncio.get_running_loop().time()
        self._prime(client)  # the baseline is on disk before start() reports "connected"
        self._ready.set()
        log.info("Discord connected as %s", client.user)
        self._spawn(self._catch_up(client, self._catch_up_state.session), "discord:catch-up")

    def _on_message(self, client: discord.Client, message: discord.Message, *,
                    live: bool = True) -> None:
        self._accept(lambda bot_id: fmt.inbound_from_message(message, bot_id), client,
                     f"message-{getattr(message, 'id', '?')}", live=live)

    def _on_reaction(self, client: discord.Client, event: discord.RawReactionActionEvent
                     ) -> None:
        self._accept(lambda bot_id: fmt.inbound_from_reaction(event, bot_id), client,
                     f"reaction-{getattr(event, 'message_id', '?')}-"
                     f"{getattr(event, 'user_id', '?')}")

    def _accept(self, convert: Callable[[int], InboundMessage | None],
                client: discord.Client, ident: str, *, live: bool = True) -> None:
        try:
            assert client.user is not None
            inbound = convert(client.user.id)
        except Exception as exc:  # one odd event must not stop the others: quarantined
            log.exception("a Discord event could not be read; quarantined")
            self._queue.put_nowait(poison_message(self.name, message_id=ident, error=exc))
            return
        if inbound is not None:
            self._enqueue(inbound, live=live)

    def _enqueue(self, message: InboundMessage, *, live: bool = True) -> None:
        """Queue once: live events and catch-up fetches may both deliver a message. A live
        message of a channel not yet caught up in this session waits for its catch-up."""
        if message.key in self._recent:
            return
        if live and self._catch_up_state.hold(message):
            return
        self._recent[message.key] = None
        if len(self._recent) > _RECENT_KEYS:
            self._recent.popitem(last=False)
        if message.kind == "message":
            self._catch_up_state.queued(int(message.chat_id), int(message.message_id))
        self._queue.put_nowait(message)

    async def read(self) -> list[InboundMessage]:
        return await drain(self._queue, 1.0)

    def cursor_state(self) -> ChannelState:
        return self._state

    def commit(self, messages: list[InboundMessage]) -> None:
        """Move each channel's cursor to the newest journaled message (only ever forward)."""
        updates: dict[str, str] = {}
        for message in messages:
            if message.provider != self.name or message.kind != "message":
                continue
            key = f"{_CURSOR}{message.chat_id}"
            current = str(updates.get(key) or self._state.get(key) or "")
            if not current.isdigit() or int(message.message_id) > int(current):
                updates[key] = message.message_id
        if updates:
            self._state.update(updates)

    def _load_cursors(self) -> None:
        for key, value in self._state.snapshot().items():
            if key.startswith(_CURSOR) and str(value).isdigit():
                channel_id = int(key.removeprefix(_CURSOR))
                self._catch_up_state.queued(channel_id, int(value))

    # -- catching up after a (re)connect -------------------------------------------------

    async def _catch_up(self, client: discord.Client, session: int) -> None:
        """Fetch what each channel missed since `session` (the one whose READY spawned this)
        began, then let its held live messages through."""
        async with self._catch_up_lock:
            self._prime(client)
            for channel_id in self._catch_up_state.behind():
                if self._closing or client is not self._client or \
                        session != self._catch_up_state.session:
                    return  # the next session fetches from the same cursors
                await self._catch_up_channel(client, channel_id, session)

    def _prime(self, client: discord.Client) -> None:
        baseline = fmt.baseline_cursors(client, self._catch_up_state.cursors)
        self._catch_up_state.cursors.update(baseline)
        if baseline:
            self._state.update({f"{_CURSOR}{cid}": str(mid) for cid, mid in baseline.items()},
                               durable=True)

    async def _catch_up_channel(self, client: discord.Client, channel_id: int,
                                session: int) -> None:
        """Every message after the channel's cursor, page by page, oldest first; a failing
        fetch is tried again a few times before the channel's live messages are let through
        (an error in the log then says what may be missing)."""
        after, fetched = self._catch_up_state.cursors.get(channel_id, 0), 0
        for attempt in range(_CATCH_UP_TRIES):
            try:
                async for page in fmt.missed_pages(client, channel_id, after,
                                                   self.catch_up_limit):
                    for message in page:
                        self._on_message(client, message, live=False)
                    fetched += len(page)
                    after = page[-1].id  # a retry goes on from the last page queued
                break
            except (discord.NotFound, discord.Forbidden) as exc:
                log.info("not catching up on Discord channel %s: %s", channel_id, exc)
                self._catch_up_state.forget(channel_id, session)
                return
            except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError) as exc:
                if attempt + 1 == _CATCH_UP_TRIES:
                    log.error("catching up on Discord channel %s failed %d times (%s); messages "
                              "written there while SoulFlow was away after id %s may be "
                              "missed", channel_id, _CATCH_UP_TRIES, exc, after)
                    break
                log.warning("catching up on Discord channel %s failed (%s); trying again",
                            channel_id, exc)
                await asyncio.sleep(self.reconnect_delay_s * 2 ** attempt)
        if fetched:
            log.info("fetched %d Discord message(s) from channel %s missed while disconnected",
                     fetched, channel_id)
        self._catch_up_state.caught_up(channel_id, session)

    # -- outbound ------------------------------------------------------------------------

    def _connected(self) -> discord.Client:
        """The gateway client while it is connected, else (shared account) the REST client."""
        for client in (self._client, self._rest):
            if client is not None and not client.is_closed() and client.user is not None:
                return client
        raise SendError("Discord is not connected (reconnecting); will retry")

    def _messageable(self, chat_id: str) -> discord.abc.Messageable:
        client = self._connected()
        if not chat_id.isdigit():
            raise SendError(f"{chat_id[:80]!r} is not a Discord channel id", permanent=True)
        channel = client.get_channel(int(chat_id))
        if isinstance(channel, discord.abc.Messageable):
            return channel
        return client.get_partial_messageable(int(chat_id))  # DMs and uncached channels

    async def send(self, message: OutboundMessage) -> SendResult:
        """One message: the text (split for Discord's limits before it was stored, see
        `soulflow.channels.splitting`) or the file it became, as a reply to the message it
        answers (a deleted one does not block it). A streamed reply's text
        (`options.edit_of`) is edited into the message the bot sent (`fmt.edit_reply`)."""
        channel = self._messageable(message.chat_id)
        edit_of = message.options.edit_of
        if edit_of and await fmt.edit_reply(self._connected(), channel.id, message):
            return SendResult(platform_message_ids=[edit_of])
        if edit_of:  # gone: the text goes out as a new message, so it is never lost
            log.info("cannot edit Discord message %s in %s; sending the text as a new message",
                     edit_of, message.chat_id)
        target = fmt.reply_target(message.reply_to)
        reference = None if target is None else discord.MessageReference(
            message_id=target, channel_id=channel.id, fail_if_not_exists=False)
        sent = await fmt.send_message(channel, message, reference)
        return SendResult(platform_message_ids=[str(sent.id)])

    async def set_typing(self, chat_id: str, on: bool) -> None:
        """Discord shows typing for ~10 s per request and has no "stop": off is a no-op.
        Sent on the feedback client (see `feedback.py`)."""
        if on:
            self._connected()
            await self._feedback.typing(chat_id)

    async def add_reaction(self, chat_id: str, message_id: str, emoji: str) -> None:
        """React on the feedback client (best effort, see `feedback.py`)."""
        self._connected()
        await self._feedback.react(chat_id, message_id, emoji)

    can_edit = True
    can_stream = True  # send() edits `options.edit_of` on the reply client

    async def edit(self, chat_id: str, message_id: str, text: str) -> None:
        """Edit the bot's message on the feedback client (best effort, like reactions)."""
        self._connected()
        await self._feedback.edit(chat_id, message_id, text[:self.limits.max_text])

    # -- files ---------------------------------------------------------------------------

    async def download(self, attachment: Attachment,
                       folder: AttachmentFolder) -> PurePosixPath:
        """Fetch an attachment from Discord's CDN into the chat's `folder`, refusing
        oversized files."""
        data = await fmt.fetch_attachment(attachment, self.max_download_bytes)
        return await folder.save(fmt.download_filename(attachment), data)
