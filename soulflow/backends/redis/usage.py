"""Model usage on Redis, shared by every node (`UsageStore`, backends/base.py).

* `usage:day:<YYYY-MM-DD>` - hash: for each row (json `[provider, model, chat, user,
  source]`) four counters `<row>|n` (calls), `<row>|p` (prompt tokens), `<row>|c`
  (completion tokens), `<row>|usd` (cost, HINCRBYFLOAT); expires `keep_days` after its
  last write, which bounds the store.
* `usage:raise:<YYYY-MM-DD>` - hash `<scope>|<approval id>` → USD: budget raises an admin
  approved that day (same TTL).
* `usage:days` - set of the days written; a day whose hash expired is dropped when read.
* `usage:names` - hash `provider:user_id` → display name (same TTL from its last write).

Increments only add, so two nodes counting the same key at once both count. While the
backend's writer runs (writeback.py), `add()` sums into this node's queue and the writer's
next batch sends each row's four increments once, with the day's EXPIRE and SADD only when
this process has not sent them for that day in the last hour; reads add what is still
queued. They go with the writer's next batch, so with the turn's own `settle()` at the latest:
another node's budget check sees a call once the turn that made it has ended. A SIGKILL
loses only the counts of a turn that had not ended (its message is answered again, and
counted again). Without the writer, a
call is one MULTI/EXEC of the same commands. A display name (`name()`) goes with the same
batches (HSET and the hash's EXPIRE), so a new person in a chat costs the turn no round trip.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from soulflow.backends.base import USAGE_KEEP_DAYS, UsageKey, UsageTotals
from soulflow.backends.redis.clients import SyncStoreRedis
from soulflow.backends.redis.keys import ServiceKeys
from soulflow.backends.redis.sync_client import StateRedis, text
from soulflow.backends.redis.writeback import Batch, WriteBehind

__all__ = ["RedisUsageStore"]

_FIELDS = ("n", "p", "c", "usd")
_TOUCH_EVERY_S = 3600.0  # how often a day's hash gets its EXPIRE and its SADD again
SNAPSHOT_FRESH_S = 1.0  # how long a `refresh()` answers `days(day)` and `raises(day)`


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """One day's counters and raises as `refresh()` read them, and when."""

    day: str
    at: float
    counters: dict[Any, Any]
    raised: dict[Any, Any]


@dataclass(slots=True)
class _StagedUsage:
    store: RedisUsageStore
    rows: dict[UsageKey, UsageTotals]
    days: dict[str, float]
    names: dict[str, str]

    def written(self, results: list[Any]) -> None:
        self.store._in_flight = {}
        self.store._touched.update(self.days)

    def failed(self) -> None:
        store = self.store
        store._in_flight = {}
        for key, totals in self.rows.items():
            store._queue(key, totals)
        store._names = {**self.names, **store._names}  # a newer name queued since wins


class RedisUsageStore:
    """`UsageStore` on Redis (see the module docstring)."""

    def __init__(self, state: StateRedis, *, keep_days: int = USAGE_KEEP_DAYS,
                 writer: WriteBehind | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client: SyncStoreRedis = state.client
        self._keys = ServiceKeys(state.prefix)
        self.keep_days = keep_days
        self._clock = clock
        self._queued: dict[UsageKey, UsageTotals] = {}
        self._in_flight: dict[UsageKey, UsageTotals] = {}
        self._touched: dict[str, float] = {}  # day → when its EXPIRE and SADD were sent
        self._snapshot: _Snapshot | None = None  # the last `refresh()`
        self._names: dict[str, str] = {}  # display names on their way (`name`)
        self._writer = writer
        if writer is not None:
            writer.register(self)

    def add(self, key: UsageKey, totals: UsageTotals) -> None:
        if self._writer is not None and self._writer.running:
            self._queue(key, totals)
            self._writer.notify()
            return
        pipe = self._client.pipeline(transaction=True)
        self._increments(pipe, key, totals)
        self._touch(pipe, key.day)
        pipe.execute()

    def _queue(self, key: UsageKey, totals: UsageTotals) -> None:
        summed = self._queued.setdefault(key, UsageTotals())
        summed.add(totals)

    def _increments(self, pipe: Any, key: UsageKey, totals: UsageTotals) -> None:
        row = json.dumps([key.provider, key.model, key.chat, key.user, key.source],
                         ensure_ascii=False)
        day = self._keys.usage_day(key.day)
        # a zero is not written: a missing counter reads as 0 (no prices configured, or a
        # server that reports no tokens, costs no command)
        for kind, amount in (("n", totals.calls), ("p", totals.prompt_tokens),
                             ("c", totals.completion_tokens)):
            if amount:
                pipe.execute_command("HINCRBY", day, f"{row}|{kind}", amount)
        if totals.cost_usd:
            pipe.execute_command("HINCRBYFLOAT", day, f"{row}|usd", repr(float(totals.cost_usd)))

    def _touch(self, pipe: Any, day: str) -> None:
        """A pipeline or a `Batch`: both take `execute_command`."""
        pipe.execute_command("EXPIRE", self._keys.usage_day(day), self.keep_days * 86_400)
        pipe.execute_command("SADD", self._keys.usage_days, day)

    def stage(self, batch: Batch, *, full: bool) -> _StagedUsage | None:
        """The writer's call, for any batch: the summed rows, and the days not touched for
        an hour. Counts go with the first batch after the call (a turn's settle carries its
        own), so another node's budget check sees a call once its turn has ended."""
        if not self._queued and not self._names:
            return None
        rows, self._queued = self._queued, {}
        names, self._names = self._names, {}
        self._in_flight = rows
        pipe = batch
        if names:
            pipe.execute_command("HSET", self._keys.usage_names,
                                 *(part for pair in names.items() for part in pair))
            pipe.execute_command("EXPIRE", self._keys.usage_names, self.keep_days * 86_400)
        now = self._clock()
        days: dict[str, float] = {}
        for key, totals in rows.items():
            self._increments(pipe, key, totals)
            touched = self._touched.get(key.day)
            if key.day not in days and (touched is None or now - touched > _TOUCH_EVERY_S):
                self._touch(pipe, key.day)
                days[key.day] = now
        return _StagedUsage(self, rows, days, names)

    async def refresh(self, day: str) -> None:
        """Read `day`'s counters and raises on the asynchronous client, for the budget check
        that follows (`SNAPSHOT_FRESH_S`)."""
        if self._writer is None:
            return
        pipe = self._writer.client.pipeline(transaction=False)
        pipe.hgetall(self._keys.usage_day(day))
        pipe.hgetall(self._keys.usage_raise(day))
        counters, raised = await pipe.execute()
        self._snapshot = _Snapshot(day, self._clock(), counters, raised)

    def _fresh(self, day: str) -> _Snapshot | None:
        snapshot = self._snapshot
        if snapshot is None or snapshot.day != day or \
                self._clock() - snapshot.at > SNAPSHOT_FRESH_S:
            return None
        return snapshot

    def days(self, first_day: str) -> list[tuple[UsageKey, UsageTotals]]:
        snapshot = self._fresh(first_day)
        if snapshot is not None and snapshot.day >= _latest(self._queued, self._in_flight):
            found = _rows(first_day, snapshot.counters)  # today's, read just before
        else:
            found = []
            days = sorted(d for d in (text(m) for m in
                                      self._client.smembers(self._keys.usage_days))
                          if d >= first_day)
            for day in days:
                raw = self._client.hgetall(self._keys.usage_day(day))
                if not raw:
                    self._client.srem(self._keys.usage_days, day)  # its hash expired
                    continue
                found.extend(_rows(day, raw))
        if not (self._in_flight or self._queued):
            return found
        summed = dict(found)
        for unwritten in (self._in_flight, self._queued):  # this node's, on their way
            for key, totals in unwritten.items():
                if key.day >= first_day:
                    summed.setdefault(key, UsageTotals()).add(totals)
        return list(summed.items())

    def name(self, user: str, name: str) -> None:
        if self._writer is not None and self._writer.running:
            self._names[user] = name
            self._writer.notify()
            return
        pipe = self._client.pipeline(transaction=True)
        pipe.hset(self._keys.usage_names, user, name)
        pipe.expire(self._keys.usage_names, self.keep_days * 86_400)
        pipe.execute()

    def names(self) -> dict[str, str]:
        stored = self._client.hgetall(self._keys.usage_names)
        return {**{text(k): text(v) for k, v in stored.items()}, **self._names}

    def raise_cap(self, day: str, scope: str, approval_id: str, amount: float) -> None:
        self._snapshot = None  # the next check reads the raise
        key = self._keys.usage_raise(day)
        pipe = self._client.pipeline(transaction=True)
        pipe.hset(key, f"{scope}|{approval_id}", repr(float(amount)))
        pipe.expire(key, self.keep_days * 86_400)
        pipe.execute()

    def raises(self, day: str) -> dict[str, float]:
        snapshot = self._fresh(day)
        raw = snapshot.raised if snapshot is not None else \
            self._client.hgetall(self._keys.usage_raise(day))
        summed: dict[str, float] = {}
        for field, value in raw.items():
            scope = text(field).rpartition("|")[0]
            summed[scope] = summed.get(scope, 0.0) + float(text(value))
        return summed


def _rows(day: str, raw: dict[Any, Any]) -> list[tuple[UsageKey, UsageTotals]]:
    """The keys and totals of one day's hash (`usage:day:<day>`)."""
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
    found = []
    for row, totals in rows.items():
        try:
            provider, model, chat, user, source = (str(v) for v in json.loads(row))
        except ValueError:
            continue
        found.append((UsageKey(day, provider, model, chat, user, source), totals))
    return found


def _latest(*queues: dict[UsageKey, UsageTotals]) -> str:
    """The latest day among queued counts ("" if none)."""
    return max((key.day for queue in queues for key in queue), default="")
