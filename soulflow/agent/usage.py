"""Counting what every model call costs: tokens and USD, per day, provider, model, chat, user
and source (`UsageStore`, backends/base.py).

The caller says whom a call is for: the run's `ChatRef` (its chat, its requester, and by its
marks whether it is a message, a task step, a cron job or a heartbeat) or an explicit source
(consolidation). Nothing is kept in a global: the meter is built once by the runtime and handed
to the loop and the consolidator.

Cost: the provider's own `usage.cost` when it reports one (OpenRouter), else the tokens times
`MODEL_PRICES` (USD per million tokens, `model=input/output` pairs), else 0.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo

from soulflow.backends.base import UsageKey, UsageStore, UsageTotals
from soulflow.contracts import QUIET_TURN_ORIGIN, ChatRef, ProviderResult
from soulflow.errors import SoulFlowError

__all__ = ["ModelPrices", "Source", "UsageMeter", "parse_prices", "source_of", "summarize", "total",
           "usage_report", "user_of"]

log = logging.getLogger(__name__)

Clock = Callable[[], float]


class Source(StrEnum):
    """Why a model call was made."""

    MESSAGE = "message"
    TASK = "task"
    CRON = "cron"
    HEARTBEAT = "heartbeat"
    CONSOLIDATION = "consolidation"


@dataclass(frozen=True, slots=True)
class ModelPrices:
    """USD per million prompt and completion tokens of one model."""

    prompt_per_mtok: float
    completion_per_mtok: float


def parse_prices(raw: str) -> dict[str, ModelPrices]:
    """`MODEL_PRICES`: comma-separated `model=input/output` (USD per million tokens), e.g.
    `openai/gpt-4o=2.5/10,phi4=0/0`. A model name may hold '/', the prices are after the
    last '='. Raises ValueError on anything else."""
    prices: dict[str, ModelPrices] = {}
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        model, sep, pair = part.rpartition("=")
        prompt, slash, completion = pair.partition("/")
        if not sep or not slash or not model.strip():
            raise ValueError(f"{part!r} is not model=input/output")
        values = float(prompt), float(completion)
        if any(not 0 <= v < 1e6 for v in values):
            raise ValueError(f"{part!r}: prices must be from 0 to 1000000 USD per Mtok")
        prices[model.strip()] = ModelPrices(*values)
    return prices


def source_of(chat: ChatRef) -> Source:
    """The source of a run's calls, from the marks its `ChatRef` carries."""
    if chat.task_id:
        return Source.TASK
    if chat.sender_id == "cron" or chat.session_key.startswith("cron:"):
        return Source.CRON
    if chat.origin == QUIET_TURN_ORIGIN:
        return Source.HEARTBEAT
    return Source.MESSAGE


def user_of(chat: ChatRef) -> str:
    """`provider:user_id` of whoever asked; empty when no person did (cron, heartbeat)."""
    who = chat.requester_id or ("" if chat.sender_id == "cron" else chat.sender_id)
    return f"{chat.provider}:{who}" if who else ""


@dataclass
class UsageMeter:
    """Records each call into `store`, and keeps this process's totals per (provider, model)
    for /metrics (Prometheus counters count from the process start)."""

    store: UsageStore
    prices: dict[str, ModelPrices] = field(default_factory=dict)
    tz: ZoneInfo = field(default_factory=lambda: ZoneInfo("UTC"))
    clock: Clock = time.time
    # (provider, model) -> totals since this process started
    counters: dict[tuple[str, str], UsageTotals] = field(default_factory=dict)
    # names this process stored: a name is written when it is new or changed, not per call
    _named: dict[str, str] = field(default_factory=dict, repr=False)

    def today(self) -> str:
        return self.day(0)

    def day(self, days_ago: int) -> str:
        now = datetime.fromtimestamp(self.clock(), UTC).astimezone(self.tz)
        return (now.date() - timedelta(days=days_ago)).isoformat()

    def cost(self, result: ProviderResult) -> float:
        if result.usage.cost_usd is not None:
            return result.usage.cost_usd
        price = self.prices.get(result.model)
        if price is None:
            return 0.0
        return (result.usage.prompt_tokens * price.prompt_per_mtok
                + result.usage.completion_tokens * price.completion_per_mtok) / 1e6

    def record(self, result: ProviderResult, chat: ChatRef,
               source: Source | None = None) -> UsageTotals:
        """Count one call (a failure to store is logged, never raised into the run: the
        answer matters more than its bookkeeping)."""
        totals = UsageTotals(1, result.usage.prompt_tokens, result.usage.completion_tokens,
                             self.cost(result))
        provider, model = result.provider or "?", result.model or "?"
        self.counters.setdefault((provider, model), UsageTotals()).add(totals)
        chat_key = f"{chat.provider}:{chat.chat_id}" if chat.provider else ""
        key = UsageKey(self.today(), provider, model, chat_key, user_of(chat),
                       str(source or source_of(chat)))
        try:
            self.store.add(key, totals)
            self._remember_name(key.user, chat.sender_name)
        except (SoulFlowError, OSError) as exc:
            log.warning("model usage not recorded (%s): %s", key, exc)
        return totals

    def _remember_name(self, user: str, name: str) -> None:
        """The person's display name beside their id, for the card and `soulflow usage`
        (the requester is the sender of the messages that count under their id)."""
        name = " ".join(name.split())[:80]
        if not user or not name or self._named.get(user) == name:
            return
        if len(self._named) >= 4096:
            self._named.clear()
        self.store.name(user, name)
        self._named[user] = name

    def rows(self, days: int = 1) -> list[tuple[UsageKey, UsageTotals]]:
        """Stored rows of the last `days` days, today included."""
        return self.store.days(self.day(max(0, days - 1)))


def summarize(rows: list[tuple[UsageKey, UsageTotals]], by: str) -> dict[str, UsageTotals]:
    """Totals grouped by one field of the key (`chat`, `user`, `source`, `model`, `day`,
    `provider`), largest cost first."""
    grouped: dict[str, UsageTotals] = {}
    for key, totals in rows:
        grouped.setdefault(str(getattr(key, by)), UsageTotals()).add(totals)
    return dict(sorted(grouped.items(), key=lambda kv: (-kv[1].cost_usd, kv[0])))


def total(rows: list[tuple[UsageKey, UsageTotals]]) -> UsageTotals:
    found = UsageTotals()
    for _key, totals in rows:
        found.add(totals)
    return found


def usage_report(meter: UsageMeter, *, days: int = 1,
                 by: tuple[str, ...] = ("chat", "user", "source", "model"),
                 names: dict[str, str] | None = None) -> dict[str, Any]:
    """The totals of the last `days` days (today included) and their split by each of `by`:
    `/api/state`'s `usage` section and `soulflow usage --json`. `names`: the display names
    as the caller read them (else read here)."""
    rows = meter.rows(days)
    users = {key.user for key, _ in rows if key.user}
    known = meter.store.names() if names is None else names
    named = {user: name for user, name in known.items() if user in users}
    return {"since": meter.day(max(0, days - 1)), "today": meter.today(),
            "total": _totals_dict(total(rows)),
            "by": {field_: [{"key": key, **_totals_dict(t)}
                            for key, t in summarize(rows, field_).items()]
                   for field_ in by},
            "names": named}


def _totals_dict(totals: UsageTotals) -> dict[str, Any]:
    return {"calls": totals.calls, "prompt_tokens": totals.prompt_tokens,
            "completion_tokens": totals.completion_tokens,
            "cost_usd": round(totals.cost_usd, 6)}
