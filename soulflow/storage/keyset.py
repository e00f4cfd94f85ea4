"""A set of keys that expire by age, kept on disk (SQLite) with a small cache in RAM.

Why on disk: the inbound journal must remember every message id it took in for as long as a
platform may deliver the message again. Held in a Python dict that cost ~210 MiB per million
ids (`bench/seen_ids.py`), so a busy daemon's memory was set by its traffic. Here an id costs
RAM only while it sits in the bounded LRU of recent keys (`cache`) or in SQLite's bounded page
cache (`cache_kib`); a lookup of an older id is one indexed read.

Why SQLite: it is in the standard library, a point lookup and an insert are microseconds, a
crash mid-write leaves the last committed state (WAL), and expiring by age is one indexed
`DELETE`. The table is `keys(key TEXT PRIMARY KEY, at REAL) WITHOUT ROWID` with an index on
`at`; `meta(name, value)` holds `alive_at`, the time of the last commit.

Durability: writes are committed by `commit()` (the owner calls it about once a second, from
a worker thread), with `synchronous=NORMAL`: a commit survives a process crash at once and a
power loss after the next checkpoint. `checkpoint()` makes every commit durable; an owner that
keeps its own record of recent keys (the inbound journal) calls it before dropping that record,
so the two together never lose a key.

Expiry: `expire()` deletes keys older than `window_s`, a bounded batch per call. After a
restart, the keys the previous run saw in its last window are kept for one more window of
running time (counted from the start): a message taken in just before a crash or a long stop
can come back when the channel reads again (its cursor may not have been stored), however long
the daemon was down, and must still be known then.

A database that cannot be opened or read is moved aside (never deleted) and started empty; the
owner repopulates it from its own record (`runtime/bus/inbound.jsonl`).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path

from soulflow.storage.atomic import quarantine

log = logging.getLogger(__name__)

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS keys (key TEXT PRIMARY KEY, at REAL NOT NULL) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS keys_at ON keys (at)",
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value REAL NOT NULL)",
)
EXPIRE_BATCH = 5_000  # rows deleted per expire() call: the lock is held for milliseconds


class ExpiringKeys:
    """Keys with the time they were added, expiring `window_s` after it; thread-safe."""

    def __init__(self, path: Path, *, window_s: float, cache: int = 4096,
                 cache_kib: int = 2048, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.window_s = window_s
        self._clock = clock
        self._cache_max = cache
        self._cache_kib = cache_kib
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        self._in_transaction = False
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = self._connect()
        except sqlite3.DatabaseError as exc:
            self._move_aside(f"{type(exc).__name__}: {exc}")
            self._db = self._connect()
        self.opened_at = self._clock()
        self.previous_alive_at = self._meta("alive_at")

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(f"PRAGMA cache_size=-{int(self._cache_kib)}")
            for statement in SCHEMA:
                db.execute(statement)
            db.execute("SELECT 1 FROM keys LIMIT 1").fetchall()
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def _move_aside(self, reason: str) -> None:
        for suffix in ("-wal", "-shm"):
            self.path.with_name(self.path.name + suffix).unlink(missing_ok=True)
        if self.path.exists():
            quarantine(self.path, reason)

    def _meta(self, name: str) -> float | None:
        row = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return float(row[0]) if row else None

    def _begin(self) -> None:
        if not self._in_transaction:
            self._db.execute("BEGIN")
            self._in_transaction = True

    def _cache(self, key: str) -> None:
        """Note a key in the LRU of recent ones (under the lock)."""
        self._recent[key] = None
        self._recent.move_to_end(key)
        if len(self._recent) > self._cache_max:
            self._recent.popitem(last=False)

    # -- the set -------------------------------------------------------------------------

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        with self._lock:
            if key in self._recent:
                return True
            found = self._db.execute("SELECT 1 FROM keys WHERE key = ?", (key,)).fetchone()
            if found:
                self._cache(key)
        return found is not None

    def add(self, key: str, at: float | None = None) -> None:
        """Remember `key` (added at `at`, default now); a key already known keeps its time."""
        self.add_many([(key, self._clock() if at is None else at)])

    def add_many(self, items: Iterable[tuple[str, float]]) -> None:
        rows = list(items)
        if not rows:
            return
        with self._lock:
            self._begin()
            self._db.executemany("INSERT OR IGNORE INTO keys (key, at) VALUES (?, ?)", rows)
            for key, _ in rows[-self._cache_max:]:
                self._cache(key)

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM keys").fetchone()[0])

    # -- durability and expiry -----------------------------------------------------------

    def commit(self) -> None:
        """Commit what was added (and note when, for the next start's expiry)."""
        with self._lock:
            self._begin()
            self._db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES ('alive_at', ?)",
                             (self._clock(),))
            self._db.execute("COMMIT")
            self._in_transaction = False

    def checkpoint(self) -> bool:
        """Commit, then copy the WAL into the database with fsyncs: everything added so far
        survives a power loss. False if SQLite could not finish (the caller keeps its own
        record for now)."""
        self.commit()
        with self._lock:
            busy, _, _ = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return busy == 0

    def horizon(self) -> float:
        """Keys added before this time are expired; see the module's docstring for why the
        previous run's last window is held after a start."""
        now = self._clock()
        horizon = now - self.window_s
        if self.previous_alive_at is not None and now < self.opened_at + self.window_s:
            horizon = min(horizon, self.previous_alive_at - self.window_s)
        return horizon

    def expire(self, batch: int = EXPIRE_BATCH) -> int:
        """Delete up to `batch` keys past the horizon, oldest first; returns how many."""
        horizon = self.horizon()
        with self._lock:
            self._begin()
            cursor = self._db.execute(
                "DELETE FROM keys WHERE key IN "
                "(SELECT key FROM keys WHERE at < ? ORDER BY at LIMIT ?)", (horizon, batch))
            removed = max(cursor.rowcount, 0)
            if removed:
                self._recent.clear()  # cheap to refill; an expired key must not linger here
        return removed

    def close(self) -> None:
        self.commit()
        with self._lock:
            self._db.close()
