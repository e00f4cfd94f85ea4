"""One pace per chat for everything the daemon sends there: replies, and a streamed reply's
edits.

Platforms count a message's edits like new messages against a chat's limit (Telegram's flood
control does; Slack and Discord rate-limit edits too), so the outbox dispatcher and a reply
stream (conversation/streaming.py) ask the same `ChatPacer` when a chat may get its next call:
never sooner than the adapter's `send_interval_s` after the last one, and never while a 429's
`retry_after` runs. A rate limit met by an edit holds the replies back too, and the other way
round, which is what the platform expects of one chat.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: chats remembered before the ones whose pace no longer matters are forgotten
_KEPT = 4096


class ChatPacer:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._last: dict[str, float] = {}  # chat key -> when its last call went out
        self._held: dict[str, float] = {}  # chat key -> no call before (a 429's retry_after)

    def ready_at(self, key: str, interval_s: float) -> float:
        """The earliest time the chat's next call may go out."""
        return max(self._last.get(key, 0.0) + interval_s, self._held.get(key, 0.0))

    def wait_s(self, key: str, interval_s: float) -> float:
        """Seconds to wait before the chat's next call (0 or less: now)."""
        return self.ready_at(key, interval_s) - self._clock()

    def sent(self, key: str) -> None:
        """A call to the chat went out now."""
        self._last[key] = self._clock()
        if len(self._last) > _KEPT:
            self._forget_idle()

    def hold(self, key: str, retry_after_s: float) -> None:
        """The platform said 429 for the chat: nothing more before `retry_after_s`."""
        until = self._clock() + max(0.0, retry_after_s)
        self._held[key] = max(self._held.get(key, 0.0), until)
        if len(self._held) > _KEPT:
            self._forget_idle()

    def _forget_idle(self) -> None:
        """Drop chats whose last call is a minute old and whose hold has ended: their pace
        is "now" either way, so a daemon that met many chats does not keep them all."""
        now = self._clock()
        self._last = {k: at for k, at in self._last.items() if at > now - 60.0}
        self._held = {k: until for k, until in self._held.items() if until > now}
