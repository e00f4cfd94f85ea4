"""Who may talk to the agent (deny by default, with one helpful refusal), and who is an admin.

Each platform has an allow-list of user ids (`*` allows everyone). An unknown user gets one
polite reply with their id and how the operator can allow them, then is ignored for a
cool-down so a persistent stranger cannot make the bot spam a channel.

Admins (`SLACK_ADMIN_USERS`, `TELEGRAM_ADMIN_USERS`, `DISCORD_ADMIN_USERS`; the local channel's
user always) may decide anyone's approval and manage every chat's secrets. Admin lists hold
explicit ids only: `*` is not honoured there, because "everyone is an admin" would silently
undo approvals bound to people and scoped secrets.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from soulflow.channels.wiring import PLATFORMS
from soulflow.config import Settings, id_list

ALLOW_ALL = "*"
ADMIN_SETTINGS: dict[str, str] = {
    "slack": "SLACK_ADMIN_USERS",
    "telegram": "TELEGRAM_ADMIN_USERS",
    "discord": "DISCORD_ADMIN_USERS",
}
"""Provider -> the setting naming its admins."""
LOCAL_PROVIDER = "local"


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


def access_policy(settings: Settings) -> AccessPolicy:
    """Deny by default: a platform's users must be listed in <PLATFORM>_ALLOWED_USERS."""
    lists = {name: id_list(settings[f"{name.upper()}_ALLOWED_USERS"]) for name in PLATFORMS}
    return AccessPolicy.from_lists(lists, cooldown_s=float(settings["REFUSAL_COOLDOWN_S"]))


@dataclass(frozen=True, slots=True)
class AdminPolicy:
    """Who is an admin on each provider; the local channel's user always is one.

    Immutable: built once at boot from the settings and shared by the secret command and the
    approval flow, so both always agree on who may act for others.
    """

    admins: Mapping[str, frozenset[str]] = field(default_factory=dict)
    always_admin_providers: frozenset[str] = frozenset({LOCAL_PROVIDER})

    @classmethod
    def from_settings(cls, settings: Any) -> AdminPolicy:
        """From ``*_ADMIN_USERS`` (``settings[name]`` lookups; comma-separated ids)."""
        admins: dict[str, frozenset[str]] = {}
        for provider, name in ADMIN_SETTINGS.items():
            try:
                raw = str(settings[name] or "")
            except KeyError:
                raw = ""
            ids = frozenset(i.strip() for i in raw.split(",") if i.strip())
            admins[provider] = ids - {ALLOW_ALL}
        return cls(admins)

    def is_admin(self, provider: str, user_id: str) -> bool:
        """True for the local operator and for ids listed in the provider's admin setting."""
        if provider in self.always_admin_providers:
            return True
        return bool(user_id) and user_id in self.admins.get(provider, frozenset())


def refusal_text(provider: str, user_id: str) -> str:
    variable = f"{provider.upper()}_ALLOWED_USERS"
    return (f"Sorry, I only answer people on my allow-list, and you are not on it yet. "
            f"Your {provider} user id is {user_id}. The operator can allow you by adding it "
            f"to {variable} (comma-separated ids, or * for everyone) and restarting SoulFlow.")
