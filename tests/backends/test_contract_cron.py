"""The cron store, the same assertions against the file store and the Redis store, then what
only a shared store does: one claimant per occurrence, and a job added on one node seen by
another node's scheduler within one poll."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from soulflow.backends.base import CronStore
from soulflow.backends.file.cron import FileCronStore
from soulflow.backends.redis.cron import RedisCronStore
from soulflow.backends.redis.sync_client import StateRedis
from soulflow.contracts import ChatRef, CronRunStatus
from soulflow.cron import CronService, Job, JobState, Schedule
from tests.backends.redis_server import RedisServer
from tests.backends.service_stores import fresh_state, node_states, state_redis  # noqa: F401

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)
CHAT = ChatRef("telegram", "42", None)

OpenStore = Callable[[], CronStore]


@pytest.fixture(params=["file", "redis"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenStore]:
    """Opens a store over the same state each call: a restart (the file store is single-writer:
    tests write through one store and reopen only to read what was persisted)."""
    if request.param == "file":
        yield lambda: FileCronStore(tmp_path / "cron" / "cron-store.json")
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    with node_states(server.url) as open_state:
        yield lambda: RedisCronStore(open_state())


def job(job_id: str, *, text: str = "stand-up", chat: ChatRef = CHAT,
        created: datetime = T0, next_run: datetime | None = T0 + timedelta(minutes=1)) -> Job:
    return Job(id=job_id, name=job_id, schedule=Schedule.from_dict({"kind": "every",
                                                                    "every_s": 60}),
               chat=chat, text=text, created_at=created.isoformat(),
               state=JobState(next_run_at=None if next_run is None else next_run.isoformat()))


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def test_jobs_are_listed_in_creation_order_and_survive_a_reopen(open_store: OpenStore) -> None:
    store = open_store()
    assert store.list() == [] and len(store) == 0
    other = ChatRef("slack", "C1", "1700000000.1")
    store.add(job("job_b", created=T0 + timedelta(seconds=1)))
    store.add(job("job_a", chat=other, text="리마인더 ☕ 🚀 \"quoted\" / slash"))
    with pytest.raises(ValueError, match="already exists"):
        store.add(job("job_a"))
    again = open_store()  # a restart: written through
    assert [j.id for j in again.list()] == ["job_a", "job_b"]
    assert [j.id for j in again.list("slack:C1")] == ["job_a"]
    assert again.get("job_a") == job("job_a", chat=other, text="리마인더 ☕ 🚀 \"quoted\" / slash")
    assert again.get("job_a").chat.thread_id == "1700000000.1"  # type: ignore[union-attr]
    assert again.get("job_b").chat.thread_id is None  # type: ignore[union-attr]
    assert len(again) == 2 and again.get("job_none") is None
    removed = again.remove("job_b")
    assert removed is not None and removed.id == "job_b"
    assert again.remove("job_b") is None
    assert [j.id for j in open_store().list()] == ["job_a"]


def test_state_changes_are_written_through(open_store: OpenStore) -> None:
    store = open_store()
    store.add(job("job_a"))
    later = (T0 + timedelta(minutes=2)).isoformat()
    changed = store.update_state("job_a", enabled=False, next_run_at=None, runs=3,
                                 last_status=CronRunStatus.ERROR, last_error="boom")
    assert not changed.enabled and changed.state.next_run_at is None
    seen = open_store().get("job_a")
    assert seen == changed and seen is not None and seen.state.last_result == "error: boom"
    assert store.update_state("job_a", enabled=True, next_run_at=later).state.runs == 3
    assert open_store().get("job_a").state.next_run_at == later  # type: ignore[union-attr]
    with pytest.raises(KeyError):
        store.update_state("job_none", runs=1)
    with pytest.raises(TypeError, match="unknown job state"):
        store.update_state("job_a", color="red")


def test_advance_moves_only_the_occurrence_it_expects(open_store: OpenStore) -> None:
    store = open_store()
    first = (T0 + timedelta(minutes=1)).isoformat()
    second = (T0 + timedelta(minutes=2)).isoformat()
    store.add(job("job_a"))
    store.add(job("job_b", next_run=None))
    moved = store.advance("job_a", first, next_run_at=second, runs=1)
    assert moved is not None and moved.state.next_run_at == second
    assert store.advance("job_a", first, next_run_at=first, runs=9) is None  # moved on
    assert open_store().get("job_a").state.runs == 1  # type: ignore[union-attr]
    assert store.advance("job_b", None, next_run_at=first) is not None  # from "no time"
    assert store.advance("job_none", None, runs=1) is None


async def test_the_scheduler_fires_and_advances_on_either_store(open_store: OpenStore) -> None:
    clock, fired = Clock(), []
    service = CronService(open_store(), lambda j, at: fired.append((j.id, at)), clock=clock)
    added = await service.add_job(name="tick", schedule=Schedule.from_dict({"kind": "every",
                                                                      "every_s": 60}),
                            chat=CHAT, text="tick")
    clock.now = T0 + timedelta(seconds=60)
    assert [(j.id, at) for j, at in await service.run_due()] == [(added.id, clock.now)]
    assert await service.run_due() == []
    stored = open_store().get(added.id)
    assert stored is not None and stored.state.runs == 1
    assert stored.state.next_run_at == (T0 + timedelta(seconds=120)).isoformat()
    assert fired == [(added.id, T0 + timedelta(seconds=60))]


# ----------------------------------------------------------------- only a shared store


def test_each_occurrence_is_claimed_once(state_redis: StateRedis,  # noqa: F811
                                         redis_server: RedisServer) -> None:
    a = RedisCronStore(state_redis, claim_ttl_s=0.2)
    b = RedisCronStore(fresh_state(redis_server.url, state_redis.prefix), claim_ttl_s=0.2)
    assert a.shared and b.shared
    assert a.claim_occurrence("job_a", "1704110460")
    assert not b.claim_occurrence("job_a", "1704110460")
    assert b.claim_occurrence("job_a", "1704110520")  # another occurrence
    ttl_ms = state_redis.client.pttl(f"{state_redis.prefix}cron:fire:job_a:1704110460")
    assert 0 < ttl_ms <= 200  # a claim of a node that died expires on its own


async def test_a_job_added_on_one_node_is_seen_by_another_within_a_poll(
        state_redis: StateRedis, redis_server: RedisServer) -> None:  # noqa: F811
    clock = Clock()
    here = CronService(RedisCronStore(state_redis), lambda j, at: None, clock=clock,
                       poll_s=1.0)
    assert here.seconds_until_next() == 1.0  # no job: still re-read every poll
    there = CronService(RedisCronStore(fresh_state(redis_server.url, state_redis.prefix)),
                        lambda j, at: None, clock=clock)
    added = await there.add_job(name="x", schedule=Schedule.from_dict({"kind": "every",
                                                                 "every_s": 10}),
                          chat=CHAT, text="x")
    assert [j.id for j in await here.list_jobs()] == [added.id]
    clock.now = T0 + timedelta(seconds=10)
    assert [j.id for j, _ in await here.run_due()] == [added.id]
    assert await there.run_due() == []  # advanced by `here`: nothing due on `there`


async def test_a_job_left_to_another_node_is_not_fired_here_and_does_not_spin(
        state_redis: StateRedis, redis_server: RedisServer) -> None:  # noqa: F811
    """`may_fire` (the runtime: a `system_event` job fires on the node holding its chat)."""
    clock, fired = Clock(), []
    elsewhere = CronService(RedisCronStore(state_redis), lambda j, at: fired.append("x"),
                            clock=clock, poll_s=1.0, may_fire=lambda job: False)
    holder = CronService(RedisCronStore(fresh_state(redis_server.url, state_redis.prefix)),
                         lambda j, at: fired.append("holder"), clock=clock)
    await holder.add_job(name="quiet",
                         schedule=Schedule.from_dict({"kind": "every", "every_s": 10}),
                         chat=CHAT, text="check")
    clock.now = T0 + timedelta(seconds=10)
    assert await elsewhere.run_due() == []
    assert elsewhere.seconds_until_next() == 1.0  # due, but not here: poll, do not spin
    assert len(await holder.run_due()) == 1 and fired == ["holder"]


def test_a_listing_never_misses_another_nodes_change(state_redis: StateRedis,  # noqa: F811
                                                     redis_server: RedisServer) -> None:
    """Listings are kept between changes (one GET of `cron:version` when nothing moved), and
    every change on any node moves the version, so the next listing shows it."""
    here = RedisCronStore(state_redis)
    there = RedisCronStore(fresh_state(redis_server.url, state_redis.prefix))
    there.add(job("job_a"))
    assert [j.state.runs for j in here.list()] == [0]
    there.update_state("job_a", runs=1)
    assert [j.state.runs for j in here.list()] == [1]
    there.advance("job_a", (T0 + timedelta(minutes=1)).isoformat(), runs=2)
    assert [j.state.runs for j in here.list()] == [2]
    there.add(job("job_b", created=T0 + timedelta(seconds=1)))
    assert [j.id for j in here.list()] == ["job_a", "job_b"]
    there.remove("job_a")
    assert [j.id for j in here.list()] == ["job_b"]
    assert here.list() == there.list()
