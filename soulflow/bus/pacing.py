"""One pace per chat for everything the daemon sends there: replies, and a streamed reply's
edits.

Platforms count a message's edits like new messages against a chat's limit (Telegram's flood
control does; Slack and Discord rate-limit edits too), so the outbox dispatcher and a reply
stream (conversation/streaming.py) ask the same `ChatPacer` when a chat may get its next call:
never sooner than the adapter's `send_interval_s` after the last one, never while a 429's
`retry_after` runs; and it counts calls against a `SendBudget` the platform documents
(Telegram: 20 messages a minute in a group, edits included; Slack: `chat.update` about 50 a
minute for the whole workspace). A stream asks with a `reserve`: it takes only what leaves
that much of the budget to the replies, so streaming does not spend what they need. A rate
limit met by an edit holds the replies back too, and the other way round, which is what the
platform expects of one chat.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

#: chats remembered before the ones whose pace no longer matters are forgotten
_KEPT = 4096


@dataclass(frozen=True, slots=True)
class SendBudget:
    """At most `calls` calls in any `window_s` seconds."""

    calls: int
    window_s: float = 60.0


def account_edits(provider: str) -> str:
    """The pacer key of a channel's account-wide edit budget (Slack's `chat.update` tier)."""
    return f"\x00edits:{provider}"


class ChatPacer:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._last: dict[str, float] = {}  # chat key -> when its last call went out
        self._held: dict[str, float] = {}  # chat key -> no call before (a 429's retry_after)
        self._recent: dict[str, deque[float]] = {}  # key -> its calls in a budget's window

    def ready_at(self, key: str, interval_s: float, budget: SendBudget | None = None,
                 reserve: int = 0) -> float:
        """The earliest time the chat's next call may go out; with `budget`, also when it
        has room for one more call beside `reserve` calls kept for others."""
        ready = max(self._last.get(key, 0.0) + interval_s, self._held.get(key, 0.0))
        if budget is None:
            return ready
        allowed = budget.calls - reserve
        if allowed <= 0:
            return float("inf")
        recent = self._window(key, budget)
        if len(recent) >= allowed:  # room once the call `allowed` places back leaves it
            ready = max(ready, recent[len(recent) - allowed] + budget.window_s)
        return ready

    def wait_s(self, key: str, interval_s: float, budget: SendBudget | None = None,
               reserve: int = 0) -> float:
        """Seconds to wait before the chat's next call (0 or less: now)."""
        return self.ready_at(key, interval_s, budget, reserve) - self._clock()

    def sent(self, key: str, budget: SendBudget | None = None) -> None:
        """A call to the chat went out now (counted against `budget` when it has one)."""
        now = self._clock()
        self._last[key] = now
        if budget is not None:
            self._window(key, budget).append(now)
        if len(self._last) > _KEPT or len(self._recent) > _KEPT:
            self._forget_idle()

    def counted(self, key: str, budget: SendBudget) -> None:
        """A call counted against a budget that is not the chat's pace (an account's)."""
        self._window(key, budget).append(self._clock())

    def hold(self, key: str, retry_after_s: float) -> None:
        """The platform said 429 for the chat: nothing more before `retry_after_s`."""
        until = self._clock() + max(0.0, retry_after_s)
        self._held[key] = max(self._held.get(key, 0.0), until)
        if len(self._held) > _KEPT:
            self._forget_idle()

    def _window(self, key: str, budget: SendBudget) -> deque[float]:
        """The key's calls within the budget's window (older ones dropped)."""
        recent = self._recent.setdefault(key, deque(maxlen=max(1, budget.calls)))
        horizon = self._clock() - budget.window_s
        while recent and recent[0] <= horizon:
            recent.popleft()
        return recent

    def _forget_idle(self) -> None:
        """Drop chats whose last call is a minute old and whose hold has ended: their pace
        is "now" either way, so a daemon that met many chats does not keep them all."""
        now = self._clock()
        self._last = {k: at for k, at in self._last.items() if at > now - 60.0}
        self._held = {k: until for k, until in self._held.items() if until > now}
        self._recent = {k: calls for k, calls in self._recent.items()
                        if calls and calls[-1] > now - 3600.0}
