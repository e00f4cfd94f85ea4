"""Model usage, the same assertions against the file and the Redis store: sums per key, a
reopened store (a restart, another node) sees them, concurrent writers (threads on the file
store, one client per writer on Redis, as several nodes would be) lose no call, odd bytes in
names round-trip, and old days are dropped (the bound)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from soulflow.backends.base import UsageKey, UsageStore, UsageTotals
from soulflow.backends.file.usage import FileUsageStore
from soulflow.backends.redis.usage import RedisUsageStore
from tests.backends.redis_server import RedisServer
from tests.backends.service_stores import node_states

Open = Callable[[], UsageStore]


class SyncedFileUsage(FileUsageStore):
    """The file store written after each add, as the daemon's sync loop does a moment later,
    so a store opened next (a restart) reads it."""

    def add(self, key: UsageKey, totals: UsageTotals) -> None:
        super().add(key, totals)
        self.sync()


@pytest.fixture(params=["file", "redis"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Open]:
    if request.param == "file":
        path = tmp_path / "usage" / "usage.json"
        yield lambda: SyncedFileUsage(path, keep_days=3)
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    with node_states(server.url) as open_state:
        yield lambda: RedisUsageStore(open_state(), keep_days=3)


def key(day: str = "2026-11-26", chat: str = "telegram:1", user: str = "telegram:42",
        source: str = "message") -> UsageKey:
    return UsageKey(day, "openrouter", "anthropic/claude-sonnet-4", chat, user, source)


def test_sums_per_key_and_a_reopened_store_sees_them(open_store: Open) -> None:
    store = open_store()
    store.add(key(), UsageTotals(1, 100, 20, 0.0015))
    store.add(key(), UsageTotals(1, 50, 5, 0.0005))
    store.add(key(source="cron", user=""), UsageTotals(1, 7, 3, 0.0))
    store.add(key(day="2026-11-25"), UsageTotals(1, 1, 1, 1.0))
    rows = dict(open_store().days("2026-11-26"))
    assert rows == {key(): UsageTotals(2, 150, 25, pytest.approx(0.002)),
                    key(source="cron", user=""): UsageTotals(1, 7, 3, 0.0)}
    assert len(open_store().days("2026-11-25")) == 3
    assert open_store().days("2026-11-27") == []


def test_concurrent_writers_lose_no_call(open_store: Open) -> None:
    first = open_store()
    # one daemon owns the file (its calls come from many tasks); each node its Redis client
    stores = [first, first] if isinstance(first, FileUsageStore) else [first, open_store()]

    def write(store: UsageStore) -> None:
        for _ in range(100):
            store.add(key(), UsageTotals(1, 3, 2, 0.25))

    threads = [threading.Thread(target=write, args=(s,)) for s in stores for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    [(found_key, totals)] = open_store().days("2026-11-26")
    assert found_key == key()
    assert totals == UsageTotals(400, 1200, 800, pytest.approx(100.0))


def test_names_with_odd_bytes_round_trip(open_store: Open) -> None:
    odd = key(chat='slack:C1|"\n\\', user="discord:é😀|p")
    open_store().add(odd, UsageTotals(1, 1, 2, 0.5))
    assert open_store().days("2026-11-26") == [(odd, UsageTotals(1, 1, 2, 0.5))]


def test_the_file_is_written_by_sync_and_close_not_per_call(tmp_path: Path) -> None:
    path = tmp_path / "usage.json"
    store = FileUsageStore(path)
    store.add(key(), UsageTotals(1, 1, 1, 0.5))
    assert not path.exists() and store.days("2026-11-26")  # counted, not written yet
    store.sync()
    assert FileUsageStore(path).days("2026-11-26") == [(key(), UsageTotals(1, 1, 1, 0.5))]
    store.add(key(), UsageTotals(1, 1, 1, 0.5))
    store.close()
    assert FileUsageStore(path).days("2026-11-26")[0][1].calls == 2
    store.raise_cap("2026-11-26", "all:", "ap_1", 2.0)  # an approval is written at once
    store.raise_cap("2026-11-26", "all:", "ap_1", 2.0)  # and counted once
    assert FileUsageStore(path).raises("2026-11-26") == {"all:": 2.0}


def test_the_file_keeps_only_the_last_days(tmp_path: Path) -> None:
    store = SyncedFileUsage(tmp_path / "usage.json", keep_days=3)
    for day in ("2026-11-20", "2026-11-24", "2026-11-25", "2026-11-26"):
        store.add(key(day=day), UsageTotals(1, 1, 1, 0.0))
    days = {k.day for k, _ in FileUsageStore(tmp_path / "usage.json").days("2000-01-01")}
    assert days == {"2026-11-24", "2026-11-25", "2026-11-26"}


def test_a_corrupt_file_row_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "usage.json"
    path.write_text('{"version": 1, "days": {"2026-11-26": [["a","b","c","d","e",1,2,3,0.5],'
                    ' ["short"], ["a","b","c","d","f","x",2,3,0.5]]}}')
    assert FileUsageStore(path).days("2026-11-26") == [
        (UsageKey("2026-11-26", "a", "b", "c", "d", "e"), UsageTotals(1, 2, 3, 0.5))]


def test_redis_day_hash_expires_with_the_kept_days(redis_server: RedisServer) -> None:
    with node_states(redis_server.url) as open_state:
        state = open_state()
        RedisUsageStore(state, keep_days=3).add(key(), UsageTotals(1, 1, 1, 0.0))
        ttl = state.client.ttl(f"{state.prefix}usage:day:2026-11-26")
        assert 3 * 86_400 - 5 <= ttl <= 3 * 86_400
        state.client.delete(f"{state.prefix}usage:day:2026-11-26")  # as if it expired
        assert RedisUsageStore(state).days("2026-11-01") == []
        assert state.client.smembers(f"{state.prefix}usage:days") == set()


def test_names_are_kept_beside_the_ids_and_a_reopened_store_sees_them(open_store: Open) -> None:
    store = open_store()
    store.name("telegram:42", "Alice")
    store.name("slack:U1", "Bob \u2014 ops")
    store.name("telegram:42", "Alice B.")  # a changed display name replaces the old one
    store.add(key(), UsageTotals(1, 1, 1, 0.0))  # (the file store writes at its sync)
    assert open_store().names() == {"telegram:42": "Alice B.", "slack:U1": "Bob \u2014 ops"}
