"""Platform rate limits and traffic counters shared by the Telegram, Slack and Discord fakes.

Real platforms answer a burst with 429 + ``retry_after``; a fake that accepts everything hides
exactly the bugs that matter under load (a retry storm, replies starved by typing calls, a
poller that hammers a read method). So each fake enforces its platform's documented limits
**by default**, and counts what it saw: replies accepted, 429s returned per method, best-effort
calls (typing, reactions, edits).

Limits are plain values on the fake instance (``fake.limits``): a test that does not care
about pacing relaxes them with :meth:`PlatformLimits.relaxed` or ``enabled=False``, and a test
that needs a limit on its own time scale (seconds, not a minute) passes one explicitly; either
way the test says so where it builds the fake.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from tests.fakes.loopback_base import Scheduled

Clock = Callable[[], float]
R = TypeVar("R")


@dataclass(frozen=True)
class Rate:
    """``per_s`` requests per second sustained, with room for ``burst`` back to back.

    A token bucket rather than a strict window: Telegram and Slack both document "about one
    per second, short bursts tolerated", which a bucket models and a window does not.
    """

    per_s: float
    burst: int = 1


@dataclass(frozen=True)
class Window:
    """At most ``count`` requests in any ``period_s`` seconds (a sliding window): how limits
    stated per minute read ("Tier 3: 50+ per minute", "no more than 20 messages per minute
    to the same group"). A full window answers with the wait until its oldest request
    leaves it."""

    count: int
    period_s: float


Limit = Rate | Window


@dataclass(frozen=True)
class PlatformLimits:
    """The limits one fake enforces. ``None`` (or no entry) disables that limit.

    ``per_chat`` applies to every chat, ``per_group`` on top of it to group chats only
    (Telegram), ``per_bot`` to all chats together, ``per_method`` to every call of a method
    whatever its chat (Slack's tiers: "per API method per workspace per app").
    ``page_limit`` caps the ``limit`` of a paginated read (and is its default).
    """

    per_chat: Limit | None
    per_bot: Limit | None = None
    per_group: Limit | None = None
    per_method: Mapping[str, Limit] = field(default_factory=dict)
    page_limit: int | None = None
    enabled: bool = True

    def relaxed(self) -> PlatformLimits:
        """The same shape, switched off: for tests that exercise something other than pacing."""
        return replace(self, enabled=False)


#: Telegram Bot FAQ: in one chat "avoid sending more than one message per second" (short
#: bursts tolerated), in a group "not more than 20 messages per minute", about 30 messages a
#: second in all. An edit (editMessageText) is paced as a message of its chat.
TELEGRAM_LIMITS = PlatformLimits(per_chat=Rate(1.0, burst=3), per_group=Window(20, 60.0),
                                 per_bot=Rate(30.0, burst=30))
#: Slack's Web API tiers, applied "per API method per workspace per app"
#: (api.slack.com/apis/rate-limits): Tier 2 "20+ per minute", Tier 3 "50+ per minute",
#: Tier 4 "100+ per minute". Each method's tier is on its reference page.
SLACK_TIER_2, SLACK_TIER_3, SLACK_TIER_4 = Window(20, 60.0), Window(50, 60.0), Window(100, 60.0)
SLACK_TIERS: dict[str, Limit] = {
    "conversations.history": SLACK_TIER_3, "conversations.replies": SLACK_TIER_3,
    "conversations.info": SLACK_TIER_3, "users.info": SLACK_TIER_4,
    "chat.update": SLACK_TIER_3, "reactions.add": SLACK_TIER_3,
    "reactions.remove": SLACK_TIER_2,
}
#: chat.postMessage (special tier): "1 message per second per channel, short bursts allowed".
SLACK_LIMITS = PlatformLimits(per_chat=Rate(1.0, burst=3), per_method=SLACK_TIERS)
#: A commercially distributed app outside the Slack Marketplace, created from 2025-05-29
#: (existing installations from 2026-03-03): conversations.history and conversations.replies
#: are limited to 1 request per minute, and their `limit` to at most (and by default) 15.
SLACK_NON_MARKETPLACE_LIMITS = replace(
    SLACK_LIMITS, page_limit=15,
    per_method={**SLACK_TIERS, "conversations.history": Window(1, 60.0),
                "conversations.replies": Window(1, 60.0)})


class TokenBuckets:
    """One token bucket per key (a chat, or the whole bot)."""

    def __init__(self, rate: Rate, clock: Clock = time.monotonic) -> None:
        self.rate = rate
        self._clock = clock
        self._state: dict[Any, tuple[float, float]] = {}  # key -> (tokens, last refill)

    def _tokens(self, key: Any, now: float) -> float:
        tokens, last = self._state.get(key, (float(self.rate.burst), now))
        return min(float(self.rate.burst), tokens + (now - last) * self.rate.per_s)

    def wait_s(self, key: Any) -> float:
        """Seconds until ``key`` may send one more (0 = now); takes nothing."""
        tokens = self._tokens(key, self._clock())
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate.per_s

    def take(self, key: Any) -> None:
        """Spend one token (callers check :meth:`wait_s` first)."""
        now = self._clock()
        self._state[key] = (self._tokens(key, now) - 1.0, now)


class SlidingWindows:
    """One sliding window per key."""

    def __init__(self, window: Window, clock: Clock = time.monotonic) -> None:
        self.window = window
        self._clock = clock
        self._times: dict[Any, deque[float]] = {}

    def _recent(self, key: Any, now: float) -> deque[float]:
        times = self._times.setdefault(key, deque())
        while times and times[0] <= now - self.window.period_s:
            times.popleft()
        return times

    def wait_s(self, key: Any) -> float:
        now = self._clock()
        times = self._recent(key, now)
        if len(times) < self.window.count:
            return 0.0
        return times[0] + self.window.period_s - now

    def take(self, key: Any) -> None:
        now = self._clock()
        self._recent(key, now).append(now)


Budget = TokenBuckets | SlidingWindows


def budget(limit: Limit | None, clock: Clock) -> Budget | None:
    if limit is None:
        return None
    if isinstance(limit, Window):
        return SlidingWindows(limit, clock)
    return TokenBuckets(limit, clock)


class Limiter:
    """Applies a :class:`PlatformLimits`: sends per chat (and group) and per bot, and every
    call of a method with a limit of its own."""

    def __init__(self, limits: PlatformLimits, clock: Clock = time.monotonic) -> None:
        self.limits = limits
        self._chat = budget(limits.per_chat, clock)
        self._group = budget(limits.per_group, clock)
        self._bot = budget(limits.per_bot, clock)
        self._methods = {method: budget(limit, clock)
                         for method, limit in limits.per_method.items()}

    def admit(self, chat: Any, *, group: bool = False) -> float:
        """Take one send for ``chat``; return 0.0, or the wait before a retry may succeed
        (nothing is taken then, as a rejected request costs no budget on the platforms)."""
        chat_budgets = [(self._chat, chat), (self._group if group else None, chat),
                        (self._bot, None)]
        return self._admit([(b, key) for b, key in chat_budgets if b is not None])

    def admit_method(self, method: str) -> float:
        """Take one call of ``method`` if it has a limit of its own; else 0.0 and nothing."""
        limited = self._methods.get(method)
        return self._admit([(limited, None)] if limited is not None else [])

    def _admit(self, budgets: list[tuple[Budget, Any]]) -> float:
        if not self.limits.enabled or not budgets:
            return 0.0
        wait = max(b.wait_s(key) for b, key in budgets)
        if wait > 0:
            return wait
        for b, key in budgets:
            b.take(key)
        return 0.0

    def page_limit(self, requested: int | None, default: int) -> int:
        """The ``limit`` a paginated read gets: ``requested`` (or ``default``), capped."""
        cap = self.limits.page_limit if self.limits.enabled else None
        wanted = default if requested is None else requested
        return wanted if cap is None else min(wanted, cap)


def whole_seconds(wait: float) -> int:
    """Telegram and Slack state ``retry_after`` in whole seconds, never 0."""
    return max(1, math.ceil(wait))


@dataclass
class TrafficCounters:
    """What a fake received, for benches and tests: replies accepted, 429s per method,
    best-effort calls (typing, read-acks, status edits) per method."""

    replies: int = 0
    rate_limited: Counter[str] = field(default_factory=Counter)
    best_effort: Counter[str] = field(default_factory=Counter)

    def snapshot(self) -> dict[str, Any]:
        """JSON-safe copy."""
        return {"replies": self.replies, "rate_limited": dict(self.rate_limited),
                "best_effort": dict(self.best_effort)}


class PacedFakeThread:
    """The same on a fake's thread wrapper: each call runs on the server loop."""

    fake: PacedFake
    call: Callable[..., Any]

    def stats(self) -> dict[str, Any]:
        return self.call(self.fake.stats)

    def set_limits(self, limits: PlatformLimits) -> None:
        self.call(self.fake.set_limits, limits)


class PacedFake:
    """The limits and counters side of a fake that paces sends with one :class:`Limiter`
    (Telegram and Slack): what tests and benches read and replace, kept in one place."""

    limiter: Limiter
    counters: TrafficCounters
    #: Methods that post a message (paced, counted as replies) and feedback calls a bot may
    #: drop under pressure (counted), spelled as `key` below.
    send_methods: frozenset[str]
    best_effort_methods: frozenset[str]
    # provided by the fake (FakeServerBase and the platform class)
    _failures: Scheduled[Any]
    _apply_delay: Callable[[str], Awaitable[None]]
    _pace: Callable[[str, Any], None]

    def _init_pacing(self, limits: PlatformLimits) -> None:
        self.limiter = Limiter(limits)
        self.counters = TrafficCounters()

    @property
    def limits(self) -> PlatformLimits:
        return self.limiter.limits

    def set_limits(self, limits: PlatformLimits) -> None:
        """Replace the enforced limits (buckets start full again)."""
        self.limiter = Limiter(limits)

    def stats(self) -> dict[str, Any]:
        """Replies accepted, 429s returned per method, best-effort calls received."""
        return self.counters.snapshot()

    async def _paced_call(self, method: str, key: str, params: Any,
                          handler: Callable[[Any], Awaitable[R]]) -> R:
        """One accepted API call, in the order both platforms apply: count a best-effort call,
        hold a scheduled delay, raise a scheduled failure, pace a send, answer, count a reply.
        `key` is the method as the schedules and method sets spell it, `method` as counted."""
        if key in self.best_effort_methods:
            self.counters.best_effort[method] += 1
        await self._apply_delay(key)
        failure = self._failures.take(key)
        if failure is not None:
            raise failure
        self._pace(key, params)
        result = await handler(params)
        if key in self.send_methods:
            self.counters.replies += 1
        return result
