"""Daily spending caps on model calls: all chats (`BUDGET_DAILY_USD`), one user
(`BUDGET_USER_DAILY_USD`) and one chat (`BUDGET_CHAT_DAILY_USD`); 0 means no cap.

Before each model call the loop asks `Budgets.reached(chat)`. A run a person asked for then
waits as an admins-only approval (`budget reached: $X of $Y today for <scope>`); approving it
raises that cap for today to the spend then plus its configured amount
(`UsageStore.raise_cap`, keyed by the
approval so a replay raises it once), and the run goes on, so the message is answered. A cron
job or heartbeat run over a cap is skipped and the operator told (`notify`).

Spent today is read from the usage store (shared by every node on Redis), so the caps hold
across nodes and restarts; days are the meter's (WORKSPACE_TIMEZONE).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from soulflow.agent.run import events as ev
from soulflow.agent.usage import Source, UsageMeter, source_of, total, user_of
from soulflow.backends.base import RunJournal
from soulflow.contracts import ChatRef

__all__ = ["BUDGET_TOOL", "BudgetHit", "Budgets", "Scope", "cap_of", "waiting_on_cap"]

log = logging.getLogger(__name__)

BUDGET_TOOL = "(budget)"  # the `tool` of a budget approval in the run journal


class Scope(StrEnum):
    ALL = "all"
    USER = "user"
    CHAT = "chat"


@dataclass(frozen=True, slots=True)
class BudgetHit:
    """A cap reached: which one (`scope`, and `key`: the user or chat, "" for all)."""

    scope: Scope
    key: str
    spent: float
    cap: float

    @property
    def raise_key(self) -> str:
        return f"{self.scope}:{self.key}"

    def text(self) -> str:
        where = {Scope.ALL: "all chats", Scope.USER: f"user {self.key}",
                 Scope.CHAT: f"chat {self.key}"}[self.scope]
        return f"budget reached: ${self.spent:.2f} of ${self.cap:.2f} today for {where}"


@dataclass
class Budgets:
    """The three caps over one meter (see the module docstring)."""

    meter: UsageMeter
    daily_usd: float = 0.0
    user_daily_usd: float = 0.0
    chat_daily_usd: float = 0.0
    # tells the operator that a cron or heartbeat run was skipped (the ops notice chat)
    notify: Callable[[str], None] = field(default=lambda text: None)
    # (day, cap, source) the operator was told about: once a day each, per process
    _told: set[tuple[str, str, str]] = field(default_factory=set, repr=False)

    @property
    def active(self) -> bool:
        return bool(self.daily_usd or self.user_daily_usd or self.chat_daily_usd)

    async def refresh(self) -> None:
        """Before a check: read today's spending ahead (a shared store answers over the
        network; the check itself must not hold the event loop waiting for it)."""
        if self.active:
            await self.meter.store.refresh(self.meter.today())

    def reached(self, chat: ChatRef) -> BudgetHit | None:
        """The first cap today's spending has reached for a call of this chat, else None."""
        if not self.active:
            return None
        day = self.meter.today()
        rows = [(k, t) for k, t in self.meter.rows() if k.day == day]
        raised = self.meter.store.raises(day)
        chat_key = f"{chat.provider}:{chat.chat_id}"
        user = user_of(chat)
        checks = [(Scope.ALL, "", self.daily_usd, lambda k: True),
                  (Scope.USER, user, self.user_daily_usd if user else 0.0,
                   lambda k: k.user == user),
                  (Scope.CHAT, chat_key, self.chat_daily_usd, lambda k: k.chat == chat_key)]
        for scope, key, cap, mine in checks:
            if not cap:
                continue
            cap += raised.get(f"{scope}:{key}", 0.0)
            spent = total([(k, t) for k, t in rows if mine(k)]).cost_usd
            if spent >= cap:
                return BudgetHit(scope, key, spent, cap)
        return None

    def base_cap(self, scope: Scope) -> float:
        return {Scope.ALL: self.daily_usd, Scope.USER: self.user_daily_usd,
                Scope.CHAT: self.chat_daily_usd}[scope]

    def approve(self, scope: str, key: str, approval_id: str, *, spent: float,
                cap: float) -> None:
        """An admin approved going over: for today the cap of `scope` rises to what was spent
        when the approval was asked plus the configured cap (one more day's worth)."""
        amount = max(0.0, spent - cap) + self.base_cap(Scope(scope))
        self.meter.store.raise_cap(self.meter.today(), f"{scope}:{key}", approval_id, amount)

    @staticmethod
    def skips(chat: ChatRef) -> bool:
        """Runs nobody is waiting for are skipped at a cap rather than paused."""
        return source_of(chat) in (Source.CRON, Source.HEARTBEAT)

    def skipped(self, chat: ChatRef, hit: BudgetHit) -> str:
        """Log a skipped run; tell the operator about the first of each day, cap and source
        (a heartbeat every minute over the cap must not become a notice a minute)."""
        text = (f"Skipped a {source_of(chat)} run in {chat.provider}:{chat.chat_id}: "
                f"{hit.text()}.")
        log.warning("%s", text)
        told = (str(self.meter.today()), hit.raise_key, str(source_of(chat)))
        if told in self._told:
            return text
        if len(self._told) > 1000:
            self._told.clear()
        self._told.add(told)
        try:
            self.notify(text)
        except Exception:  # telling must never break the run's end
            log.exception("could not tell the operator about a skipped run")
        return text


def cap_of(approval: dict[str, Any]) -> str | None:
    """The cap (`BudgetHit.raise_key`) a budget approval is about; None for other approvals."""
    if approval.get("tool") != BUDGET_TOOL:
        return None
    arguments = approval.get("arguments") or {}
    return f"{arguments.get('scope')}:{arguments.get('key', '')}"


def waiting_on_cap(store: RunJournal, raise_key: str, *, chat_key: str | None = None
                   ) -> list[tuple[str, str]]:
    """(run id, approval id) of every run waiting on a budget approval for this cap, in one
    chat or in all of them. Read only when a cap is reached or such an approval decided."""
    found = []
    for run_id in store.find(chat_key=chat_key, statuses=frozenset({ev.WAITING_APPROVAL})):
        approval = store.state(run_id).open_approval() or {}
        if cap_of(approval) == raise_key:
            found.append((run_id, str(approval["approval_id"])))
    return found
