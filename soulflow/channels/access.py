"""Who may talk to the agent: deny by default, with one helpful refusal.

Each platform has an allow-list of user ids (`*` allows everyone). An unknown user gets one
polite reply with their id and how the operator can allow them, then is ignored for a
cool-down so a persistent stranger cannot make the bot spam a channel.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

ALLOW_ALL = "*"


@dataclass
class AccessPolicy:
    """Allow-lists per provider; providers missing from `allowed` deny everyone."""

    allowed: dict[str, frozenset[str]]
    always_allowed_providers: frozenset[str] = frozenset({"local"})
    cooldown_s: float = 3600.0
    clock: Callable[[], float] = time.monotonic
    _refused_at: dict[tuple[str, str], float] = field(default_factory=dict)

    @classmethod
    def from_lists(cls, lists: dict[str, Iterable[str]], **kwargs: object) -> AccessPolicy:
        return cls({p: frozenset(i.strip() for i in ids if i.strip())
                    for p, ids in lists.items()}, **kwargs)  # type: ignore[arg-type]

    def is_allowed(self, provider: str, user_id: str) -> bool:
        if provider in self.always_allowed_providers:
            return True
        ids = self.allowed.get(provider, frozenset())
        return ALLOW_ALL in ids or user_id in ids

    def should_explain_refusal(self, provider: str, user_id: str) -> bool:
        """True the first time (per cool-down) an unknown user writes."""
        key = (provider, user_id)
        now = self.clock()
        last = self._refused_at.get(key)
        if last is not None and now - last < self.cooldown_s:
            return False
        self._refused_at[key] = now
        return True


def refusal_text(provider: str, user_id: str) -> str:
    variable = f"{provider.upper()}_ALLOWED_USERS"
    return (f"Sorry, I only answer people on my allow-list, and you are not on it yet. "
            f"Your {provider} user id is {user_id}. The operator can allow you by adding it "
            f"to {variable} (comma-separated ids, or * for everyone) and restarting SoulFlow.")
