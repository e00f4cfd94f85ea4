"""The two ways Slack messages come in: the Socket Mode receiver and the history poller.

Socket Mode pushes each event in an envelope that must be acknowledged within 3 seconds or
Slack redelivers it. The receiver therefore only queues and acks each envelope, at once;
parsing happens later in `read()`, where a malformed event is logged and skipped instead
of breaking the connection. Reconnects (Slack's periodic `disconnect`
requests, dropped TCP connections) are the SDK's job.

Without an app token there is no push, so the poller reads one channel's history and the
threads the bot answered in, keeping its positions in `ChannelState`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.web.async_client import AsyncWebClient

from soulflow.channels.base import ChannelError, drain
from soulflow.channels.poison import poison_message
from soulflow.channels.slack.format import (
    SlackEventParser,
    error_code,
    newest,
    retry_after,
    ts_key,
    valid_ts,
)
from soulflow.channels.state import ChannelState
from soulflow.contracts import InboundMessage

log = logging.getLogger(__name__)

#: state keys `follow:<node id>`: threads a node that does not poll answered in (shared account)
FOLLOW_PREFIX = "follow:"
EVENT_TYPES = frozenset({"message", "app_mention", "reaction_added"})
NETWORK_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)
_APP_TOKEN_REJECTED = frozenset({"invalid_auth", "not_authed", "not_allowed_token_type",
                                 "account_inactive", "token_revoked", "token_expired"})


class SocketStartError(ChannelError):
    """Socket Mode could not be opened; the message says what to fix."""


class RecentKeys:
    """A bounded set of recently seen keys: dedupes `app_mention` + `message` pairs and
    Slack's redeliveries without growing forever."""

    def __init__(self, limit: int = 5000) -> None:
        self._keys: OrderedDict[str, None] = OrderedDict()
        self._limit = limit

    def add(self, key: str) -> bool:
        """Remember `key`; False if it was already there."""
        if key in self._keys:
            self._keys.move_to_end(key)
            return False
        self._keys[key] = None
        if len(self._keys) > self._limit:
            self._keys.popitem(last=False)
        return True


def envelope_event(envelope: Any) -> dict[str, Any] | None:
    """The Events API event inside a Socket Mode envelope, or None (logged) if there is none."""
    if not isinstance(envelope, dict) or envelope.get("type") != "events_api":
        kind = envelope.get("type") if isinstance(envelope, dict) else type(envelope).__name__
        log.debug("slack: ignoring a %r socket envelope", kind)
        return None
    payload = envelope.get("payload")
    event = payload.get("event") if isinstance(payload, dict) else None
    if not isinstance(event, dict):
        log.warning("slack: skipping an events_api envelope without an event")
        return None
    if event.get("type") not in EVENT_TYPES:
        log.debug("slack: ignoring event type %r", event.get("type"))
        return None
    return event


class SocketReceiver:
    """A Socket Mode connection that acks every envelope at once and queues it for `read()`."""

    def __init__(self, app_token: str, web: AsyncWebClient, *, ping_interval_s: float) -> None:
        self._app_token = app_token
        self._web = web
        self._ping_interval_s = ping_interval_s
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._client: SocketModeClient | None = None

    async def connect(self, timeout: float = 15.0) -> None:
        """Check the app token, then connect; raise `SocketStartError` with the fix."""
        url = await self._open_url()
        client = SocketModeClient(app_token=self._app_token, web_client=self._web,
                                  ping_interval=self._ping_interval_s, logger=log)
        # the SDK retries a failing first URL forever; this one is already known to be good
        client.wss_uri = url
        client.message_listeners.append(self._on_message)
        self._client = client
        try:
            await asyncio.wait_for(client.connect(), timeout)
        except TimeoutError:
            await self.close()
            raise SocketStartError(f"could not open the Slack Socket Mode websocket within "
                                   f"{timeout:.0f}s") from None

    async def _open_url(self) -> str:
        try:
            response = await self._web.apps_connections_open(app_token=self._app_token)
        except SlackApiError as exc:
            error = exc.response.get("error")
            if error in _APP_TOKEN_REJECTED:
                raise SocketStartError(
                    f"Slack rejected SLACK_APP_TOKEN ({error}); it must be an app-level token "
                    "(xapp-...) with the connections:write scope and Socket Mode enabled"
                ) from None
            raise SocketStartError(f"Slack refused to open Socket Mode ({error})") from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise SocketStartError(f"cannot reach Slack to open Socket Mode: {exc}") from None
        return str(response["url"])

    async def _on_message(self, client: Any, message: dict[str, Any], raw: str | None) -> None:
        """Raw-message listener: runs even for envelopes the SDK cannot parse, so every
        envelope is acked (an unacked one would be redelivered again and again)."""
        envelope_id = message.get("envelope_id")
        if not envelope_id:
            return  # hello, disconnect: handled by the SDK
        self._queue.put_nowait(message)  # before any await: keeps arrival order
        try:
            await client.send_socket_mode_response({"envelope_id": envelope_id})
        except Exception as exc:  # Slack redelivers; the duplicate is deduped on read
            log.warning("slack: could not ack envelope %s: %s", envelope_id, exc)

    async def next_batch(self, wait_s: float) -> list[dict[str, Any]]:
        """Queued envelopes, waiting up to `wait_s` for the first one."""
        return await drain(self._queue, wait_s)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()


class HistoryPoller:
    """Polling mode: `conversations.history` of one channel, `conversations.replies` of the
    threads the bot answered in.

    Read positions run ahead in memory so a message is returned once; the persisted cursors
    (`cursor:<channel>`, `thread_cursors`) move only in `commit()`, after the intake has
    journaled the messages, so a crash replays instead of skipping. With no cursor yet the
    newest history page comes back as `priming` (seen, never answered).
    """

    def __init__(self, web: Callable[[], AsyncWebClient], channel: str, state: ChannelState,
                 parser: SlackEventParser, *, interval_s: float, follow_s: float) -> None:
        self._web, self.channel, self._state, self._parser = web, channel, state, parser
        self.interval_s, self.follow_s = interval_s, follow_s
        self._recent = RecentKeys()
        self._next_poll = 0.0
        self._history_pos = newest(state.get(self.cursor_key))
        threads = state.get("threads") or {}
        #: thread_ts -> when the bot last replied there
        self.threads = {k: float(v) for k, v in threads.items() if isinstance(v, int | float)}
        cursors = state.get("thread_cursors") or {}
        self._thread_pos = {k: v for k, v in cursors.items() if newest(v)}

    @property
    def cursor_key(self) -> str:
        return f"cursor:{self.channel}"

    async def poll(self) -> list[InboundMessage]:
        """Wait for the next poll slot, then return what is new (possibly nothing)."""
        loop = asyncio.get_running_loop()
        delay = self._next_poll - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        self._next_poll = loop.time() + self.interval_s
        if self._state.shared:
            await self._adopt_followed()
        return await self._poll_history() + await self._poll_threads()

    async def _adopt_followed(self) -> None:
        """Threads the other nodes answered in (shared account), followed from their reply."""
        try:
            published = await self._state.fetch(FOLLOW_PREFIX)
        except Exception as exc:  # Redis away: the next poll tries again
            log.debug("slack: cannot read the threads other nodes follow (%s)", exc)
            return
        now = time.time()
        for threads in published.values():
            for thread_ts, at in (threads.items() if isinstance(threads, dict) else ()):
                if (isinstance(at, int | float) and now - at <= self.follow_s
                        and at > self.threads.get(thread_ts, 0.0)):
                    self.threads[thread_ts] = float(at)
                    self._thread_pos.setdefault(thread_ts, thread_ts)

    async def _fetch(self, method: str, all_pages: bool, **kwargs: Any) -> list[Any] | None:
        """Messages of one (paginated) call; None (logged) when it failed."""
        call = getattr(self._web(), method.replace(".", "_"))
        try:
            first = await call(**kwargs)
            if not all_pages:
                return list(first.get("messages") or [])
            return [m async for page in first for m in page.get("messages") or []]
        except SlackApiError as exc:
            if exc.response.status_code == 429:  # the longest wait asked for wins
                self._next_poll = max(self._next_poll,
                                      asyncio.get_running_loop().time() + retry_after(exc))
            log.warning("slack: %s of %s failed (%s)", method, self.channel, error_code(exc))
        except NETWORK_ERRORS as exc:
            log.warning("slack: %s failed (%s: %s)", method, type(exc).__name__, exc)
        return None

    async def _poll_history(self) -> list[InboundMessage]:
        priming = self._history_pos is None
        kwargs: dict[str, Any] = {"channel": self.channel, "limit": 200}
        if not priming:
            kwargs["oldest"] = self._history_pos
        # priming only needs a position to start from: the newest page is enough
        raw = await self._fetch("conversations.history", not priming, **kwargs)
        if raw is None:
            return []
        self._history_pos = newest(self._history_pos, *map(valid_ts, raw)) or "0"
        if priming:  # history is never answered: save the start position at once
            self._state.set(self.cursor_key, self._history_pos)
            await self._state.drain()
        return self._convert(raw, "history", priming)

    async def _poll_threads(self) -> list[InboundMessage]:
        found: list[InboundMessage] = []
        for thread_ts, replied_at in list(self.threads.items()):
            if time.time() - replied_at > self.follow_s:
                self.threads.pop(thread_ts, None)
                self._thread_pos.pop(thread_ts, None)
                continue
            oldest = self._thread_pos.get(thread_ts, thread_ts)
            raw = await self._fetch("conversations.replies", True, channel=self.channel,
                                    ts=thread_ts, oldest=oldest, limit=200)
            if raw is None:
                continue
            newer = [m for m in raw if (ts := valid_ts(m)) and ts != thread_ts
                     and ts_key(ts) > ts_key(oldest)]
            self._thread_pos[thread_ts] = newest(oldest, *map(valid_ts, newer)) or oldest
            found += self._convert(newer, "thread", False)
        return found

    def _convert(self, raw: list[Any], source: str, priming: bool) -> list[InboundMessage]:
        fresh = []
        for entry in sorted(raw, key=lambda m: ts_key(valid_ts(m) or "0")):
            try:
                message = self._parser.parse(entry, channel=self.channel, priming=priming)
            except Exception as exc:  # quarantined by the intake; the cursor passes it
                message = poison_message("slack", message_id=f"ts-{valid_ts(entry)}",
                                         error=exc, raw=entry, chat_id=self.channel)
                message.platform_data["ts"] = valid_ts(entry)
            if message is None or not self._recent.add(message.key):
                continue
            message.platform_data["polled"] = source
            if message.thread_id in self.threads:
                message.platform_data["bot_thread"] = True
            fresh.append(message)
        return fresh

    def commit(self, messages: list[InboundMessage]) -> None:
        """Persist the cursors up to `messages`, and the threads still followed."""
        state, updates = self._state, {}
        polled = [(m.platform_data.get("polled"), m.thread_id, m.platform_data.get("ts"))
                  for m in messages]
        cursor = newest(state.get(self.cursor_key),
                        *(ts for source, _, ts in polled if source == "history"))
        if cursor is not None:
            updates[self.cursor_key] = cursor
        cursors = dict(state.get("thread_cursors") or {})
        for source, thread_ts, ts in polled:
            latest = newest(cursors.get(thread_ts), ts) if source == "thread" else None
            if thread_ts and latest:
                cursors[thread_ts] = latest
        updates["thread_cursors"] = {k: v for k, v in cursors.items() if k in self.threads}
        updates["threads"] = dict(self.threads)
        state.update(updates)

    def follow(self, thread_ts: str) -> None:
        """The bot replied in `thread_ts`: read its replies for `follow_s` from now on
        (persisted at once, so a restart keeps following it)."""
        self.threads[thread_ts] = time.time()
        self._thread_pos.setdefault(thread_ts, thread_ts)
        cursors = dict(self._state.get("thread_cursors") or {})
        cursors.setdefault(thread_ts, thread_ts)
        self._state.update({"threads": dict(self.threads), "thread_cursors": cursors})
