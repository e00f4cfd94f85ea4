"""Model usage on files: `runtime/usage/usage.json`, the sums per day × provider × model ×
chat × user × source (`UsageStore`, backends/base.py).

One small JSON file, rewritten atomically by `sync()`, which the backend's journal-sync loop
calls in a worker thread every JOURNAL_FSYNC_INTERVAL_MS and at stop: a write (and its fsync)
per call in the event loop cost ~1.2 ms of CPU and ~8 ms of latency per message. A `kill -9`
loses at most the calls of the last interval, as the journals do. The file is bounded: only
the last `keep_days` days are kept (older days are dropped when a later day is written), and a
day holds one row per key, not per call.
"""

from __future__ import annotations

import threading
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from soulflow.backends.base import USAGE_KEEP_DAYS, UsageKey, UsageTotals
from soulflow.storage.atomic import read_json, write_json_atomic

__all__ = ["FileUsageStore"]

VERSION = 1
MAX_NAMES = 2_000  # display names kept (the oldest go first)
Row = tuple[str, str, str, str, str]  # provider, model, chat, user, source


class FileUsageStore:
    """`UsageStore` in one JSON file (see the module docstring)."""

    def __init__(self, path: Path, *, keep_days: int = USAGE_KEEP_DAYS) -> None:
        self.path = path
        self.keep_days = keep_days
        self._lock = threading.Lock()
        self._days: dict[str, dict[Row, UsageTotals]] | None = None
        self._raises: dict[str, dict[str, float]] = {}  # day -> "scope|approval" -> USD
        self._names: dict[str, str] = {}  # provider:user_id -> display name
        self._dirty = False  # counts added since the last write

    def _load(self) -> dict[str, dict[Row, UsageTotals]]:
        if self._days is None:
            data = read_json(self.path, None)
            self._days = _parse(data)
            self._raises = _parse_raises(data)
            self._names = _parse_names(data)
        return self._days

    def _write(self) -> None:
        days = self._load()
        _prune(days, self.keep_days)
        for day in [d for d in self._raises if d not in days and d < max(days, default="")]:
            del self._raises[day]
        while len(self._names) > MAX_NAMES:
            del self._names[next(iter(self._names))]
        write_json_atomic(self.path, {**_dump(days), "raises": self._raises,
                                      "names": self._names}, indent=None)
        self._dirty = False

    def raise_cap(self, day: str, scope: str, approval_id: str, amount: float) -> None:
        with self._lock:
            self._load()
            self._raises.setdefault(day, {})[f"{scope}|{approval_id}"] = amount
            self._write()  # rare, and an approval must not be lost: at once

    def raises(self, day: str) -> dict[str, float]:
        with self._lock:
            if self._days is None:
                found = _parse_raises(read_json(self.path, None)).get(day, {})
            else:
                found = self._raises.get(day, {})
            summed: dict[str, float] = {}
            for key, amount in found.items():
                scope = key.rpartition("|")[0]
                summed[scope] = summed.get(scope, 0.0) + amount
            return summed

    def name(self, user: str, name: str) -> None:
        with self._lock:
            self._load()
            self._names.pop(user, None)  # the newest last: the oldest go first at the cap
            self._names[user] = name
            self._dirty = True

    def names(self) -> dict[str, str]:
        with self._lock:
            if self._days is None:  # `soulflow usage` reads while the daemon writes
                return _parse_names(read_json(self.path, None))
            return dict(self._names)

    def add(self, key: UsageKey, totals: UsageTotals) -> None:
        with self._lock:
            days = self._load()
            row: Row = (key.provider, key.model, key.chat, key.user, key.source)
            days.setdefault(key.day, {}).setdefault(row, UsageTotals()).add(totals)
            self._dirty = True

    def sync(self) -> None:
        """Write what was added since the last write (safe from a worker thread)."""
        with self._lock:
            if self._dirty:
                self._write()

    def close(self) -> None:
        self.sync()

    async def refresh(self, day: str) -> None:
        """Nothing to read ahead: the counters are in memory."""

    def days(self, first_day: str) -> list[tuple[UsageKey, UsageTotals]]:
        with self._lock:
            # read again: `soulflow usage` reads while the daemon writes
            days = _parse(read_json(self.path, None)) if self._days is None else self._days
            return [(UsageKey(day, *row), UsageTotals(t.calls, t.prompt_tokens,
                                                      t.completion_tokens, t.cost_usd))
                    for day in sorted(days) if day >= first_day
                    for row, t in days[day].items()]


def _prune(days: dict[str, dict[Row, UsageTotals]], keep_days: int) -> None:
    try:
        newest = date.fromisoformat(max(days))
    except ValueError:
        return
    first = (newest - timedelta(days=keep_days - 1)).isoformat()
    for day in [d for d in days if d < first]:
        del days[day]


def _dump(days: dict[str, dict[Row, UsageTotals]]) -> dict[str, Any]:
    return {"version": VERSION, "days": {
        day: [[*row, t.calls, t.prompt_tokens, t.completion_tokens, round(t.cost_usd, 9)]
              for row, t in rows.items()] for day, rows in sorted(days.items())}}


def _parse(data: Any) -> dict[str, dict[Row, UsageTotals]]:
    days: dict[str, dict[Row, UsageTotals]] = {}
    if not isinstance(data, dict) or not isinstance(data.get("days"), dict):
        return days
    for day, rows in data["days"].items():
        if not isinstance(rows, list):
            continue
        for raw in rows:
            if not (isinstance(raw, list) and len(raw) == 9):
                continue  # a row this version cannot read is skipped, never fatal
            row = tuple(str(v) for v in raw[:5])
            try:
                totals = UsageTotals(int(raw[5]), int(raw[6]), int(raw[7]), float(raw[8]))
            except (TypeError, ValueError):
                continue
            days.setdefault(str(day), {})[row] = totals  # type: ignore[index]
    return days


def _parse_raises(data: Any) -> dict[str, dict[str, float]]:
    raw = data.get("raises") if isinstance(data, dict) else None
    if not isinstance(raw, dict):
        return {}
    return {str(day): {str(k): float(v) for k, v in entries.items()
                       if isinstance(v, int | float)}
            for day, entries in raw.items() if isinstance(entries, dict)}


def _parse_names(data: Any) -> dict[str, str]:
    names = data.get("names") if isinstance(data, dict) else None
    if not isinstance(names, dict):
        return {}
    return {str(k): str(v) for k, v in names.items() if isinstance(v, str)}
