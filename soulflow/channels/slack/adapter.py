"""The Slack channel: Socket Mode (push) or history polling, replies via the Web API.

Only this package (`soulflow/channels/slack/`) imports slack_sdk, so the rest of SoulFlow
never sees a Slack object. The inbound transports (Socket Mode receiver, history poller) live
in `inbound`; pure conversions (mrkdwn, events, timestamps) in `format`; the sender names and
thread context added to a message in `enrich`. Files people share are downloaded here, with
the bot token sent only to Slack's own hosts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from soulflow.bus.pacing import SendBudget
from soulflow.channels.base import (
    BEST_EFFORT_CONNECTIONS,
    AttachmentFolder,
    ChannelAdapter,
    ChannelError,
    ChannelLimits,
)
from soulflow.channels.files import safe_filename
from soulflow.channels.lenient_http import LenientResponse
from soulflow.channels.poison import poison_message
from soulflow.channels.slack.edits import update_reply
from soulflow.channels.slack.enrich import SlackEnricher
from soulflow.channels.slack.format import (
    BOT_TOKEN_REJECTED,
    CONTENT_ERRORS,
    SlackEventParser,
    api_send_error,
    error_code,
    escape,
    markdown_to_mrkdwn,
)
from soulflow.channels.slack.inbound import (
    FOLLOW_PREFIX,
    NETWORK_ERRORS,
    HistoryPoller,
    RecentKeys,
    SocketReceiver,
    SocketStartError,
    envelope_event,
)
from soulflow.channels.slack.resend import ResendGuard, reply_metadata
from soulflow.channels.splitting import split_text
from soulflow.channels.state import ChannelState
from soulflow.contracts import Attachment, InboundMessage, OutboundMessage, SendError, SendResult

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://slack.com/api/"
_REPLY_TIMEOUT_S = 30.0  # slack_sdk's own default


class SlackStartError(ChannelError):
    """The Slack channel cannot start; the message is one sentence saying what to fix."""


class SlackChannel(ChannelAdapter):
    """Slack through a bot token, in one of two modes.

    *Socket Mode* (`app_token` set): Slack pushes events over a websocket; every message,
    mention, DM and `reaction_added` the app is subscribed to is delivered.
    *Polling* (no `app_token`): `conversations.history` of `default_channel` every
    `poll_interval_s`, plus `conversations.replies` of threads the bot answered in during
    the last `thread_follow_s`. Polling never delivers reactions (Slack has no history of
    reaction events), DMs, or threads the bot has not replied in.

    Slack has no typing indicator for bots, so `set_typing` is the base class's no-op (which
    tells `ChannelFeedback` not to run a typing ticker at all); the read-ack reaction gives
    the user feedback instead.
    """

    name = "slack"

    def __init__(self, *, bot_token: str, state: ChannelState, app_token: str | None = None,
                 api_url: str = DEFAULT_API_URL, default_channel: str | None = None,
                 poll_interval_s: float = 2.0, max_download_bytes: int = 20 * 2**20,
                 send_interval_s: float = 1.0, thread_follow_s: float = 3600,
                 socket_ping_interval_s: float = 5.0, feedback_timeout_s: float = 5.0) -> None:
        self.limits = ChannelLimits(max_text=3500, chunk_size=3400,
                                    file_fallback_threshold=14_000,
                                    send_interval_s=send_interval_s)
        self.bot_token = bot_token
        self.app_token = app_token or None
        self.api_url = api_url if api_url.endswith("/") else api_url + "/"
        self.default_channel = default_channel or None
        self.poll_interval_s = poll_interval_s
        self.max_download_bytes = max_download_bytes
        self.thread_follow_s = thread_follow_s
        self.socket_ping_interval_s = socket_ping_interval_s
        self.feedback_timeout_s = feedback_timeout_s
        self.bot_user_id = ""
        self.team = ""
        self._state = state
        self._session: aiohttp.ClientSession | None = None
        self._web: AsyncWebClient | None = None
        self._post_web: AsyncWebClient | None = None
        self._feedback_session: aiohttp.ClientSession | None = None
        self._feedback_web: AsyncWebClient | None = None
        self._socket: SocketReceiver | None = None
        self._parser = SlackEventParser(bot_user_id="")
        self._recent = RecentKeys()
        self._enricher = SlackEnricher(self._api)
        self._poller: HistoryPoller | None = None
        self._followed: dict[str, float] = {}  # threads answered here while another node polls
        self._resends = ResendGuard(self._api, lambda: self.bot_user_id)  # exactly once

    @property
    def socket_mode(self) -> bool:
        return self.app_token is not None

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Check the bot token (auth.test) and, when polling, the channel; then start reading
        unless the account is shared, where the reader does that on the node leading it."""
        if not self.socket_mode and not self.default_channel:
            raise SlackStartError("SLACK_DEFAULT_CHANNEL is required when SLACK_APP_TOKEN is "
                                  "not set (polling mode reads one channel's history)")
        # slack_sdk applies its `timeout` only to sessions it creates itself, never to one
        # passed in: the bound must be on the session, or a hung call waits aiohttp's 300 s
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=_REPLY_TIMEOUT_S),
                                              response_class=LenientResponse)
        self._web = AsyncWebClient(token=self.bot_token, base_url=self.api_url,
                                   session=self._session)
        # replies: no blind retry of a post whose connection broke (slack_sdk's default
        # handler would post again what Slack may have taken); the dispatcher retries it,
        # after looking for it (see `send`)
        self._post_web = AsyncWebClient(token=self.bot_token, base_url=self.api_url,
                                        session=self._session, retry_handlers=[])
        self._start_feedback_client()
        await self._open_then_read(self._check_account())

    async def _check_account(self) -> None:
        await self._identify()
        if not self.socket_mode:
            await self._check_channel()

    async def start_reading(self) -> None:
        """Open Socket Mode, or set up the history poller from the stored cursors."""
        await self._state.load()
        if self.socket_mode:
            if self._socket is None:
                await self._connect_socket()
        else:
            self._poller = HistoryPoller(
                self._api, str(self.default_channel), self._state, self._parser,
                interval_s=self.poll_interval_s, follow_s=self.thread_follow_s)

    async def stop_reading(self) -> None:
        """Close Socket Mode (Slack sends the events to the new reader's connection) or stop
        polling; store the cursors first."""
        socket, self._socket = self._socket, None
        if socket is not None:
            await socket.close()
        self._poller = None
        await self._state.drain()
        await self._state.close()

    async def _identify(self) -> None:
        try:
            auth = await self._api().auth_test()
        except SlackApiError as exc:
            code = error_code(exc)
            if code in BOT_TOKEN_REJECTED:
                raise SlackStartError(
                    f"Slack rejected SLACK_BOT_TOKEN ({code}); copy the Bot User OAuth Token "
                    "(xoxb-...) of an installed Slack app into SLACK_BOT_TOKEN") from None
            raise SlackStartError(f"Slack auth.test failed ({code})") from None
        except NETWORK_ERRORS as exc:
            raise SlackStartError(f"cannot reach the Slack API at {self.api_url}: {exc}") from None
        self.bot_user_id, self.team = str(auth["user_id"]), str(auth.get("team") or "")
        self._parser = SlackEventParser(self.bot_user_id, auth.get("bot_id"))

    async def _connect_socket(self) -> None:
        # the app token is passed per call; this client must not carry the bot token
        web = AsyncWebClient(base_url=self.api_url, session=self._session)
        self._socket = SocketReceiver(str(self.app_token), web,
                                      ping_interval_s=self.socket_ping_interval_s)
        try:
            await self._socket.connect()
        except SocketStartError as exc:
            raise SlackStartError(str(exc)) from None

    async def _check_channel(self) -> None:
        """Fail at start, not at every poll, when the polled channel cannot be read."""
        channel = self.default_channel
        try:
            info = (await self._api().conversations_info(channel=channel))["channel"]
        except SlackApiError as exc:
            code = error_code(exc)
            if code == "channel_not_found":
                raise SlackStartError(f"SLACK_DEFAULT_CHANNEL {channel} was not found; use the "
                                      "channel id (C...) of a channel the bot is in") from None
            log.warning("slack: cannot check channel %s (%s); polling anyway", channel, code)
            return
        except NETWORK_ERRORS as exc:
            raise SlackStartError(f"cannot reach the Slack API at {self.api_url}: {exc}") from None
        if info.get("is_member") is False:
            raise SlackStartError(f"the Slack bot is not a member of SLACK_DEFAULT_CHANNEL "
                                  f"{channel}; invite it with /invite @<bot name>")

    def _start_feedback_client(self) -> None:
        """Reactions go through a client of their own: a small connection pool, a short
        timeout and no retry handlers, so a burst of read-acks (or a 429 on them) can never
        hold a connection or a retry a reply needs."""
        connector = aiohttp.TCPConnector(limit=BEST_EFFORT_CONNECTIONS)
        self._feedback_session = aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=self.feedback_timeout_s))
        self._feedback_web = AsyncWebClient(token=self.bot_token, base_url=self.api_url,
                                            session=self._feedback_session, retry_handlers=[])

    async def stop(self) -> None:
        await self.stop_reading()  # cursors stored before we say stopped
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        feedback, self._feedback_session = self._feedback_session, None
        if feedback is not None:
            await feedback.close()
        self._web = self._post_web = self._feedback_web = None

    def _api(self) -> AsyncWebClient:
        if self._web is None:
            raise RuntimeError("the Slack channel is not started")
        return self._web

    # -- inbound -------------------------------------------------------------------------

    async def read(self) -> list[InboundMessage]:
        """New messages; a bad event or a failed poll is logged, never raised."""
        self._api()
        if self._poller is None and self._socket is None:
            await asyncio.sleep(1.0)  # not reading (stopped, or another node reads)
            return []
        try:
            batch = await (self._poller.poll() if self._poller else self._read_socket())
            await self._enricher.fill(batch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("slack: reading failed; will try again")
            self.read_error = f"reading failed ({type(exc).__name__}: {exc})"
            return []
        self.read_error = None
        return batch

    async def _read_socket(self) -> list[InboundMessage]:
        assert self._socket is not None
        fresh = []
        for envelope in await self._socket.next_batch(1.0):
            try:
                event = envelope_event(envelope)
                message = self._parser.parse(event) if event is not None else None
            except Exception as exc:  # quarantined by the intake; the others go on
                message = poison_message(
                    self.name, message_id=f"envelope-{envelope.get('envelope_id')}",
                    error=exc, raw=envelope)
            if message is not None and self._recent.add(message.key):
                fresh.append(message)
        return fresh

    def cursor_state(self) -> ChannelState:
        return self._state

    def commit(self, messages: list[InboundMessage]) -> None:
        """Persist the polling cursors up to `messages` (journaled by now)."""
        if self._poller is not None:
            self._poller.commit(messages)

    # -- outbound ------------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> SendResult:
        if self._web is None or not self.bot_user_id:
            # not started yet (or stopped), or auth.test has not answered: the bot's own id
            # is what tells its earlier posts apart (`ResendGuard`), so the dispatcher waits
            raise SendError("the Slack channel is not started")
        options = message.options
        if options.edit_of and await update_reply(self._api(), message):
            return SendResult(platform_message_ids=[options.edit_of])
        thread_ts = message.thread_id or (message.reply_to if options.thread_reply else None)
        ids = await self._resends.posted_before(message, thread_ts)  # exactly once
        if not ids:
            ids = await self._deliver(message, thread_ts)
        if thread_ts and not self.socket_mode and message.chat_id == self.default_channel:
            await self._follow(thread_ts)
        return SendResult(platform_message_ids=ids)

    async def _deliver(self, message: OutboundMessage, thread_ts: str | None) -> list[str]:
        try:
            if message.options.as_file:
                ids = await self._upload(message, thread_ts)
            else:
                ids = await self._post_text(message, thread_ts)
        except SlackApiError as exc:
            raise api_send_error(exc) from None
        except SlackClientError as exc:
            raise SendError(f"Slack client refused the request: {exc}", permanent=True) from None
        except NETWORK_ERRORS as exc:  # Slack may have taken it before the answer was lost
            self._resends.unsure(message.message_id)
            raise SendError(f"network error talking to Slack: {type(exc).__name__}: {exc}"
                            ) from None
        self._resends.settled(message.message_id)
        return ids

    async def _follow(self, thread_ts: str) -> None:
        """Polling: read the replies of a thread the bot answered in. On a shared account the
        reply may go out from a node that does not poll: it publishes the threads it answered
        in (under `follow:<node id>`, written by this node only), and the poller adopts them."""
        if self._poller is not None:
            self._poller.follow(thread_ts)
            return
        if self.leadership is None:
            return
        now = time.time()
        self._followed = {ts: at for ts, at in self._followed.items()
                          if now - at <= self.thread_follow_s}
        self._followed[thread_ts] = now
        try:
            await self._state.publish(f"{FOLLOW_PREFIX}{self.leadership.node_id}",
                                      dict(self._followed))
        except Exception as exc:  # the reply is out; only the thread's follow-ups are missed
            log.warning("slack: cannot share the thread %s to follow (%s: %s)", thread_ts,
                        type(exc).__name__, exc)

    async def _upload(self, message: OutboundMessage, thread_ts: str | None) -> list[str]:
        if not message.content:
            raise SendError("cannot upload an empty file to Slack", permanent=True)
        options = message.options
        reply = await self._api().files_upload_v2(
            channel=message.chat_id, thread_ts=thread_ts, content=message.content,
            filename=options.filename or "reply.txt", initial_comment=options.note or None)
        files = reply.get("files") or [reply.get("file")]
        return [str(f["id"]) for f in files if isinstance(f, dict) and f.get("id")]

    async def _post_text(self, message: OutboundMessage, thread_ts: str | None) -> list[str]:
        chat_id, text, tag = message.chat_id, message.content, reply_metadata(message.message_id)
        if not text.strip():
            raise SendError("Slack does not accept an empty message", permanent=True)
        try:
            return [await self._post(chat_id, markdown_to_mrkdwn(text), thread_ts, tag)]
        except SlackApiError as exc:
            code = error_code(exc)
            if code not in CONTENT_ERRORS:
                raise
        log.warning("slack: %s rejected the formatted reply (%s); sending it as plain text",
                    chat_id, code)
        # the reply was split for Slack's limits before it was stored (splitting.py); a part
        # Slack still calls too long goes as plain parts under the chunk size, a recovery
        parts = split_text(text, self.limits.chunk_size) if code == "msg_too_long" else [text]
        return [await self._post(chat_id, escape(part), thread_ts, tag, mrkdwn=False)
                for part in parts]

    async def _post(self, chat_id: str, text: str, thread_ts: str | None,
                    metadata: dict[str, Any], *, mrkdwn: bool = True) -> str:
        if self._post_web is None:
            raise RuntimeError("the Slack channel is not started")
        reply = await self._post_web.chat_postMessage(channel=chat_id, text=text,
                                                   thread_ts=thread_ts, unfurl_links=False,
                                                   mrkdwn=mrkdwn, metadata=metadata)
        return str(reply["ts"])

    async def add_reaction(self, chat_id: str, message_id: str, emoji: str) -> None:
        """React with `emoji` (`eyes` or `:eyes:`); reacting twice is not an error.
        Best effort: sent on the feedback client (see `_start_feedback_client`)."""
        if self._feedback_web is None:
            raise SendError("the Slack channel is not started")
        try:
            await self._feedback_web.reactions_add(channel=chat_id, timestamp=message_id,
                                            name=emoji.strip().strip(":"))
        except SlackApiError as exc:
            if error_code(exc) != "already_reacted":
                raise api_send_error(exc) from None
        except NETWORK_ERRORS as exc:
            raise SendError(f"network error talking to Slack: {exc}") from None

    can_edit = True
    can_stream = True  # send() edits `options.edit_of` on the reply client
    #: chat.update is Tier 3, "50+ per minute" per workspace and app, whatever the channel
    edit_budget = SendBudget(50, 60.0)

    async def edit(self, chat_id: str, message_id: str, text: str) -> None:
        """chat.update on the feedback client (best effort, like reactions)."""
        if self._feedback_web is None:
            raise SendError("the Slack channel is not started")
        try:
            await self._feedback_web.chat_update(channel=chat_id, ts=message_id,
                                                 text=markdown_to_mrkdwn(text))
        except SlackApiError as exc:
            raise api_send_error(exc) from None
        except NETWORK_ERRORS as exc:
            raise SendError(f"network error talking to Slack: {exc}") from None

    # -- files ---------------------------------------------------------------------------

    async def download(self, attachment: Attachment,
                       folder: AttachmentFolder) -> PurePosixPath:
        """Fetch a shared file (bot token required) into the chat's `folder`, at most
        `max_download_bytes`; raises OSError with the reason otherwise."""
        url, limit, label = attachment.url, self.max_download_bytes, attachment.name
        if not url:
            raise OSError(f"Slack file {label!r} has no download URL")
        if attachment.size is not None and attachment.size > limit:
            raise OSError(f"Slack file {label!r} is {attachment.size:,} bytes; the limit is "
                          f"{limit:,}")
        if not _trusted_file_host(url, self.api_url):
            raise OSError(f"refusing to send the Slack token to {urlsplit(url).hostname}")
        if self._session is None:
            raise OSError("the Slack channel is not started")
        data = await _fetch_file(self._session, url, token=self.bot_token, label=label,
                                 mime_type=attachment.mime_type, limit=limit)
        return await folder.save(safe_filename(label, attachment.file_id or ""), data)


def _trusted_file_host(url: str, api_url: str) -> bool:
    """Slack's hosts (or the configured API host, for proxies and tests): never send the bot
    token anywhere else, whatever URL an event carries."""
    host = (urlsplit(url).hostname or "").lower()
    api_host = (urlsplit(api_url).hostname or "").lower()
    return bool(host) and (host == api_host or host == "slack.com"
                           or host.endswith(".slack.com"))


async def _fetch_file(session: aiohttp.ClientSession, url: str, *, token: str, label: str,
                      mime_type: str | None, limit: int) -> bytes:
    """The file's bytes, at most `limit`; OSError says why not (HTTP error, login page
    instead of the file when the token lacks files:read, too large, network)."""
    data = bytearray()
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with session.get(url, headers=headers,
                               timeout=aiohttp.ClientTimeout(total=300)) as resp:
            if resp.status != 200:
                raise OSError(f"Slack answered HTTP {resp.status} for file {label!r}")
            if resp.content_type == "text/html" and mime_type != "text/html":
                raise OSError(f"Slack served a login page instead of {label!r}: the bot "
                              "token needs the files:read scope")
            async for chunk in resp.content.iter_chunked(64 * 1024):
                data += chunk
                if len(data) > limit:
                    raise OSError(f"Slack file {label!r} exceeds the {limit:,}-byte limit")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise OSError(f"download of {label!r} failed: {exc}") from None
    return bytes(data)
