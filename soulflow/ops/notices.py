"""Problems that last, told to a person - once, then at most every `interval_s`.

A problem is a key (`channel:slack`, `loop:cron`, `provider`) and a sentence. It is
reported when it has lasted `after_s`, again only after `interval_s` if it is still there,
and a short "resolved" follows when it goes away after having been reported. A flapping
channel thus costs one message per interval, not one per tick.

In a cluster every node keeps its own board (its loops and channels are its own), and `claim`
makes a notice once per interval across the nodes: a problem several nodes see at once (a model
provider down) is told by whichever node claims it first; the others count it as told and send
no "resolved" for it either.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from soulflow.backends.base import NoticeClaims, Offload, call_here

log = logging.getLogger(__name__)

__all__ = ["NoticeBoard", "Problem"]


@dataclass(slots=True)
class Problem:
    key: str
    message: str
    since: float
    notified_at: float | None = None
    told_elsewhere: bool = False  # another node told it (a cluster): no "resolved" from here

    def to_dict(self) -> dict[str, object]:
        return {"key": self.key, "message": self.message, "since": self.since,
                "notified_at": self.notified_at, "told_elsewhere": self.told_elsewhere}


class NoticeBoard:
    def __init__(self, send: Callable[[str], None], *, after_s: float,
                 interval_s: float, claim: NoticeClaims | None = None,
                 offload: Offload = call_here) -> None:
        self._send = send
        self.after_s = after_s
        self.interval_s = interval_s
        self._claim = claim
        self._offload = offload  # the claims' round trips, off the event loop
        self.problems: dict[str, Problem] = {}
        self.sent = 0

    async def update(self, current: Mapping[str, str], now: float) -> list[str]:
        """Take this tick's problems (key -> sentence); returns the notices sent."""
        sent: list[str] = []
        for key in [k for k in self.problems if k not in current]:
            gone = self.problems.pop(key)
            if gone.notified_at is not None and not gone.told_elsewhere:
                sent.append(self._notify(f"Resolved: {gone.message}"))
        due: list[Problem] = []
        for key, message in current.items():
            problem = self.problems.get(key)
            if problem is None:
                problem = self.problems[key] = Problem(key, message, now)
            problem.message = message
            lasted = now - problem.since >= self.after_s
            quiet = problem.notified_at is None or now - problem.notified_at >= self.interval_s
            if lasted and quiet:
                due.append(problem)
        if self._claim is not None and due:
            for problem in await self._offload(self._told_elsewhere, due):
                due.remove(problem)
                problem.notified_at, problem.told_elsewhere = now, True
        for problem in due:
            problem.told_elsewhere = False
        if due:
            lines = [f"- {p.message} (for {(now - p.since) / 60:.0f} min)" for p in due]
            sent.append(self._notify("SoulFlow ops: something stays broken\n" +
                                     "\n".join(lines)))
            for problem in due:
                problem.notified_at = now
        return sent

    def _told_elsewhere(self, due: list[Problem]) -> list[Problem]:
        """The problems another node claimed first (it tells them)."""
        return [problem for problem in due if not self._claimed(problem)]

    def _claimed(self, problem: Problem) -> bool:
        """Whether this node tells `problem`; when the claim cannot be asked (Redis away, as
        likely as not the problem itself), it does: a notice twice beats none."""
        assert self._claim is not None
        try:
            return self._claim(problem.key, self.interval_s)
        except Exception as exc:
            log.warning("could not claim the notice %s (%s); telling it from this node",
                        problem.key, exc)
            return True

    def _notify(self, text: str) -> str:
        self._send(text)
        self.sent += 1
        return text
