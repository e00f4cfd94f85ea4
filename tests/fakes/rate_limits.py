"""Platform rate limits and traffic counters shared by the Telegram, Slack and Discord fakes.

Real platforms answer a burst with 429 + ``retry_after``; a fake that accepts everything hides
exactly the bugs that matter under load (a retry storm, replies starved by typing calls). So
each fake enforces its platform's documented limits **by default**, and counts what it saw:
replies accepted, 429s returned per method, best-effort calls (typing, reactions, edits).

Limits are plain values on the fake instance (``fake.limits``): a test that does not care
about pacing relaxes them with :meth:`PlatformLimits.relaxed` or ``enabled=False``.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable
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
class PlatformLimits:
    """The limits one fake enforces. ``None`` disables that limit."""

    per_chat: Rate | None
    per_bot: Rate | None = None
    enabled: bool = True

    def relaxed(self) -> PlatformLimits:
        """The same shape, switched off: for tests that exercise something other than pacing."""
        return replace(self, enabled=False)


#: Telegram Bot FAQ: about 1 message/s in one chat (short bursts tolerated), 30/s per bot.
TELEGRAM_LIMITS = PlatformLimits(per_chat=Rate(1.0, burst=3), per_bot=Rate(30.0, burst=30))
#: Slack chat.postMessage: "1 message per second per channel, short bursts allowed".
SLACK_LIMITS = PlatformLimits(per_chat=Rate(1.0, burst=3))


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


class Limiter:
    """Applies a :class:`PlatformLimits` to sends: per chat and, if set, per bot."""

    def __init__(self, limits: PlatformLimits, clock: Clock = time.monotonic) -> None:
        self.limits = limits
        self._chat = TokenBuckets(limits.per_chat, clock) if limits.per_chat else None
        self._bot = TokenBuckets(limits.per_bot, clock) if limits.per_bot else None

    def admit(self, chat: Any) -> float:
        """Take one send for ``chat``; return 0.0, or the wait before a retry may succeed
        (nothing is taken then, as a rejected request costs no budget on the platforms)."""
        if not self.limits.enabled:
            return 0.0
        waits = [0.0]
        if self._chat is not None:
            waits.append(self._chat.wait_s(chat))
        if self._bot is not None:
            waits.append(self._bot.wait_s(None))
        wait = max(waits)
        if wait > 0:
            return wait
        if self._chat is not None:
            self._chat.take(chat)
        if self._bot is not None:
            self._bot.take(None)
        return 0.0


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
