"""Model usage on Redis, shared by every node (`UsageStore`, backends/base.py).

* `usage:day:<YYYY-MM-DD>` - hash: for each row (json `[provider, model, chat, user,
  source]`) four counters `<row>|n` (calls), `<row>|p` (prompt tokens), `<row>|c`
  (completion tokens), `<row>|usd` (cost, HINCRBYFLOAT); expires `keep_days` after its
  last write, which bounds the store.
* `usage:raise:<YYYY-MM-DD>` - hash `<scope>|<approval id>` → USD: budget raises an admin
  approved that day (same TTL).
* `usage:days` - set of the days written; a day whose hash expired is dropped when read.
* `usage:names` - hash `provider:user_id` → display name (same TTL from its last write).

One call is one MULTI/EXEC round trip of eight commands (MULTI, four increments, EXPIRE, SADD,
EXEC), so two nodes counting the same key at once both count.
"""

from __future__ import annotations

import json

from soulflow.backends.base import USAGE_KEEP_DAYS, UsageKey, UsageTotals
from soulflow.backends.redis.clients import SyncStoreRedis
from soulflow.backends.redis.keys import ServiceKeys
from soulflow.backends.redis.sync_client import StateRedis, text

__all__ = ["RedisUsageStore"]

_FIELDS = ("n", "p", "c", "usd")


class RedisUsageStore:
    """`UsageStore` on Redis (see the module docstring)."""

    def __init__(self, state: StateRedis, *, keep_days: int = USAGE_KEEP_DAYS) -> None:
        self._client: SyncStoreRedis = state.client
        self._keys = ServiceKeys(state.prefix)
        self.keep_days = keep_days

    def add(self, key: UsageKey, totals: UsageTotals) -> None:
        row = json.dumps([key.provider, key.model, key.chat, key.user, key.source],
                         ensure_ascii=False)
        day = self._keys.usage_day(key.day)
        pipe = self._client.pipeline(transaction=True)
        pipe.hincrby(day, f"{row}|n", totals.calls)
        pipe.hincrby(day, f"{row}|p", totals.prompt_tokens)
        pipe.hincrby(day, f"{row}|c", totals.completion_tokens)
        pipe.hincrbyfloat(day, f"{row}|usd", totals.cost_usd)
        pipe.expire(day, self.keep_days * 86_400)
        pipe.sadd(self._keys.usage_days, key.day)
        pipe.execute()

    def days(self, first_day: str) -> list[tuple[UsageKey, UsageTotals]]:
        days = sorted(d for d in (text(m) for m in self._client.smembers(self._keys.usage_days))
                      if d >= first_day)
        found: list[tuple[UsageKey, UsageTotals]] = []
        for day in days:
            raw = self._client.hgetall(self._keys.usage_day(day))
            if not raw:
                self._client.srem(self._keys.usage_days, day)  # its hash expired
                continue
            rows: dict[str, UsageTotals] = {}
            for field, value in raw.items():
                row, _, kind = text(field).rpartition("|")
                if kind not in _FIELDS:
                    continue
                totals = rows.setdefault(row, UsageTotals())
                number = text(value)
                if kind == "n":
                    totals.calls = int(number)
                elif kind == "p":
                    totals.prompt_tokens = int(number)
                elif kind == "c":
                    totals.completion_tokens = int(number)
                else:
                    totals.cost_usd = float(number)
            for row, totals in rows.items():
                try:
                    provider, model, chat, user, source = (str(v) for v in json.loads(row))
                except ValueError:
                    continue
                found.append((UsageKey(day, provider, model, chat, user, source), totals))
        return found

    def name(self, user: str, name: str) -> None:
        pipe = self._client.pipeline(transaction=True)
        pipe.hset(self._keys.usage_names, user, name)
        pipe.expire(self._keys.usage_names, self.keep_days * 86_400)
        pipe.execute()

    def names(self) -> dict[str, str]:
        return {text(k): text(v) for k, v in self._client.hgetall(self._keys.usage_names).items()}

    def raise_cap(self, day: str, scope: str, approval_id: str, amount: float) -> None:
        key = self._keys.usage_raise(day)
        pipe = self._client.pipeline(transaction=True)
        pipe.hset(key, f"{scope}|{approval_id}", repr(float(amount)))
        pipe.expire(key, self.keep_days * 86_400)
        pipe.execute()

    def raises(self, day: str) -> dict[str, float]:
        summed: dict[str, float] = {}
        for field, value in self._client.hgetall(self._keys.usage_raise(day)).items():
            scope = text(field).rpartition("|")[0]
            summed[scope] = summed.get(scope, 0.0) + float(text(value))
        return summed
