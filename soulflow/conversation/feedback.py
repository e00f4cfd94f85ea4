"""Signals that a message was seen and is being worked on: read-ack reactions and typing.

Both are cosmetic, so they are *best effort* and must never cost a reply anything:

- They never delay a reply: every call runs in a background task of its own, bounded by a
  short timeout; the reply path only starts or stops them and never waits for a platform.
- They never take a reply's connection or rate budget: adapters send them on a separate small
  client (`BEST_EFFORT_CONNECTIONS`), and at most that many run at once per adapter here; a
  call that finds the budget full is skipped, not queued, and nothing is ever retried.
- A rate limit (`SendError.retry_after`) on one of them cools down feedback for that chat for
  the time asked; when a second chat of the same adapter hits one during a cool-down, the bot's
  own budget is exhausted and feedback cools down for the whole adapter. Replies never see it.
- They are coalesced, because a burst must not turn into a flood of calls that real platforms
  answer with 429s: one typing indicator per chat while its work runs (re-sent every
  `typing_refresh_s`, and never twice within that interval, however many messages queue up);
  at most one read-ack per chat per `read_ack_interval_s`, and none while more than
  `read_ack_backlog` messages wait in that chat (the typing indicator already says "seen").

`ChannelFeedback` is owned by the conversation; its clock is injected so that the
rate-limit decisions can be tested without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from soulflow.channels.base import BEST_EFFORT_CONNECTIONS, ChannelAdapter
from soulflow.contracts import SendError

log = logging.getLogger(__name__)

Clock = Callable[[], float]
READ_ACK_EMOJI = {"slack": "eyes", "telegram": "👀", "discord": "👀"}
_NEVER = float("-inf")
_MAX_IDLE_CHATS = 2048


def has_typing(adapter: ChannelAdapter) -> bool:
    """False for platforms without an indicator (they keep the base class's no-op), so no
    ticker runs for them."""
    return type(adapter).set_typing is not ChannelAdapter.set_typing


@dataclass(frozen=True, slots=True)
class FeedbackPolicy:
    """How much feedback a chat gets; `CHANNEL_TYPING_REFRESH_S`, `CHANNEL_READ_ACK_*`."""

    typing_refresh_s: float = 4.0
    read_ack_interval_s: float = 5.0
    read_ack_backlog: int = 2
    call_timeout_s: float = 5.0
    max_in_flight: int = BEST_EFFORT_CONNECTIONS
    default_cooldown_s: float = 5.0  # a 429 that does not say how long to wait


@dataclass(slots=True)
class _ChatFeedback:
    """What one chat has been shown lately and who is working in it."""

    holders: int = 0
    last_typing: float = _NEVER
    last_ack: float = _NEVER
    cooldown_until: float = _NEVER
    ticker: asyncio.Task[None] | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def idle(self, now: float, horizon: float) -> bool:
        return (self.holders == 0 and self.ticker is None
                and max(self.last_typing, self.last_ack, self.cooldown_until) < now - horizon)


@dataclass(slots=True)
class FeedbackStats:
    """Counters for the dashboard and tests: what was sent, skipped and why."""

    typing_sent: int = 0
    acks_sent: int = 0
    skipped_backlog: int = 0
    skipped_interval: int = 0
    skipped_cooldown: int = 0
    skipped_budget: int = 0
    failed: int = 0
    rate_limited: int = 0
    timed_out: int = 0


class ChannelFeedback:
    """Read-acks and typing indicators for every adapter, coalesced per chat."""

    def __init__(self, policy: FeedbackPolicy | None = None, *,
                 clock: Clock = time.monotonic) -> None:
        self.policy = policy or FeedbackPolicy()
        self.stats = FeedbackStats()
        self._clock = clock
        self._chats: dict[tuple[str, str], _ChatFeedback] = {}
        self._adapter_cooldown: dict[str, float] = {}
        self._in_flight: dict[str, int] = {}
        self._calls: set[asyncio.Task[None]] = set()
        self._closed = False

    # -- read-acks -----------------------------------------------------------------------

    def acknowledge(self, adapter: ChannelAdapter | None, chat_id: str, message_id: str, *,
                    backlog: int = 0) -> bool:
        """React to a message to show it was read, unless the chat has had one recently or a
        backlog waits in it. Returns at once; True when a reaction was started."""
        emoji = READ_ACK_EMOJI.get(adapter.name) if adapter is not None else None
        if adapter is None or emoji is None or self._closed:
            return False
        chat, now = self._chat(adapter.name, chat_id), self._clock()
        if backlog > self.policy.read_ack_backlog:
            self.stats.skipped_backlog += 1
            return False
        if now - chat.last_ack < self.policy.read_ack_interval_s:
            self.stats.skipped_interval += 1
            return False
        started = self._start_call(adapter, chat_id, "read-ack",
                                   lambda: adapter.add_reaction(chat_id, message_id, emoji))
        if started:
            chat.last_ack = now
            self.stats.acks_sent += 1
        return started

    # -- typing --------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def typing_while(self, adapter: ChannelAdapter | None,
                           chat_id: str) -> AsyncIterator[None]:
        """Show a typing indicator in the chat while the block runs.

        One ticker per chat serves every block running in it, so queued messages share one
        indicator. Leaving the block never waits for the platform."""
        if adapter is None or self._closed or not has_typing(adapter):
            yield
            return
        key = (adapter.name, chat_id)
        chat = self._chat(*key)
        chat.holders += 1
        chat.wake.set()
        if self._typing_due_in(adapter.name, chat) <= 0:  # at once, even if the work is quick
            self._send_typing(adapter, chat_id, chat)
        if chat.ticker is None:
            chat.ticker = asyncio.create_task(self._tick(adapter, chat_id, chat),
                                              name=f"feedback:typing:{adapter.name}:{chat_id}")
        try:
            yield
        finally:
            chat.holders -= 1
            chat.wake.set()

    async def _tick(self, adapter: ChannelAdapter, chat_id: str, chat: _ChatFeedback) -> None:
        """Re-send typing while anyone holds the chat; after the last leaves, clear it once."""
        try:
            while chat.holders > 0:
                wait = self._typing_due_in(adapter.name, chat)
                if wait <= 0:
                    self._send_typing(adapter, chat_id, chat)
                    wait = self.policy.typing_refresh_s
                chat.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(chat.wake.wait(), wait)
            self._start_call(adapter, chat_id, "typing-off",
                             lambda: adapter.set_typing(chat_id, False))
        finally:
            chat.ticker = None

    def _typing_due_in(self, adapter_name: str, chat: _ChatFeedback) -> float:
        now = self._clock()
        cooling = max(chat.cooldown_until, self._adapter_cooldown.get(adapter_name, _NEVER))
        return max(chat.last_typing + self.policy.typing_refresh_s, cooling) - now

    def _send_typing(self, adapter: ChannelAdapter, chat_id: str, chat: _ChatFeedback) -> None:
        if self._start_call(adapter, chat_id, "typing", lambda: adapter.set_typing(chat_id, True)):
            chat.last_typing = self._clock()
            self.stats.typing_sent += 1
        else:  # budget full: try again after a quarter interval rather than a whole one
            chat.last_typing = (self._clock() - self.policy.typing_refresh_s * 0.75)

    # -- calls ---------------------------------------------------------------------------

    def _start_call(self, adapter: ChannelAdapter, chat_id: str, kind: str,
                    call: Callable[[], Awaitable[None]]) -> bool:
        """Run one best-effort call in the background if the chat and adapter allow it."""
        name, now = adapter.name, self._clock()
        if kind != "typing-off" and self._cooling(name, chat_id, now):
            self.stats.skipped_cooldown += 1
            return False
        if self._in_flight.get(name, 0) >= self.policy.max_in_flight:
            self.stats.skipped_budget += 1
            return False
        self._in_flight[name] = self._in_flight.get(name, 0) + 1
        task = asyncio.create_task(self._run_call(adapter, chat_id, kind, call),
                                   name=f"feedback:{kind}:{name}:{chat_id}")
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)
        return True

    async def _run_call(self, adapter: ChannelAdapter, chat_id: str, kind: str,
                        call: Callable[[], Awaitable[None]]) -> None:
        try:
            async with asyncio.timeout(self.policy.call_timeout_s):
                await call()
        except TimeoutError:  # a platform that cannot answer feedback now: stop asking a while
            self.stats.timed_out += 1
            self._cool_down(adapter.name, chat_id, None)
            log.debug("%s on %s/%s timed out", kind, adapter.name, chat_id)
        except SendError as exc:
            if exc.retry_after is not None:
                self.stats.rate_limited += 1
                self._cool_down(adapter.name, chat_id, exc.retry_after)
            else:
                self.stats.failed += 1
            log.debug("%s on %s/%s failed: %s", kind, adapter.name, chat_id, exc)
        except Exception as exc:  # cosmetic: never let it surface
            self.stats.failed += 1
            log.debug("%s on %s/%s failed: %s: %s", kind, adapter.name, chat_id,
                      type(exc).__name__, exc)
        finally:
            self._in_flight[adapter.name] -= 1

    def _cooling(self, adapter_name: str, chat_id: str, now: float) -> bool:
        chat = self._chats.get((adapter_name, chat_id))
        chat_until = chat.cooldown_until if chat is not None else _NEVER
        return now < max(chat_until, self._adapter_cooldown.get(adapter_name, _NEVER))

    def _cool_down(self, adapter_name: str, chat_id: str, retry_after: float | None) -> None:
        """No feedback in this chat until the platform's wait is over; a second chat cooling
        down at the same time means the bot's whole budget is spent: cool the adapter too."""
        now = self._clock()
        until = now + (retry_after if retry_after is not None else
                       self.policy.default_cooldown_s)
        others_cooling = any(
            c.cooldown_until > now for (name, other), c in self._chats.items()
            if name == adapter_name and other != chat_id)
        chat = self._chat(adapter_name, chat_id)
        chat.cooldown_until = max(chat.cooldown_until, until)
        if others_cooling:
            self._adapter_cooldown[adapter_name] = max(
                self._adapter_cooldown.get(adapter_name, _NEVER), until)
        log.info("%s is rate-limiting or not answering feedback in %s; no typing or read-acks "
                 "there for %.1f s",
                 adapter_name, "every chat" if others_cooling else chat_id, until - now)

    # -- bookkeeping ---------------------------------------------------------------------

    def _chat(self, adapter_name: str, chat_id: str) -> _ChatFeedback:
        key = (adapter_name, chat_id)
        chat = self._chats.get(key)
        if chat is None:
            if len(self._chats) >= _MAX_IDLE_CHATS:
                self._forget_idle()
            chat = self._chats[key] = _ChatFeedback()
        return chat

    def _forget_idle(self) -> None:
        """Drop chats with nothing recent to remember, so memory stays bounded."""
        p = self.policy
        horizon = max(p.typing_refresh_s, p.read_ack_interval_s, p.default_cooldown_s)
        now = self._clock()
        for key in [k for k, c in self._chats.items() if c.idle(now, horizon)]:
            del self._chats[key]

    @property
    def in_flight(self) -> int:
        """Best-effort calls running now, all adapters."""
        return len(self._calls)

    async def stop(self) -> None:
        """Stop every ticker and in-flight call (shutdown: nothing cosmetic is worth waiting
        for)."""
        self._closed = True
        tasks = [c.ticker for c in self._chats.values() if c.ticker is not None]
        tasks += list(self._calls)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
