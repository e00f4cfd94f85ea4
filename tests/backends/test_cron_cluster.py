"""Two schedulers on one Redis: every scheduled time of a job fires once across the cluster,
and when one scheduler dies between firing an occurrence and advancing the job, the other fires
that occurrence again after the claim expires (the shared seen ids drop the repeat) and carries
on.

Each scheduler runs in its own thread with its own event loop and Redis client, as two daemons
would. Time runs ten times faster than the wall clock (a job every 10 s fires every real
second); the claims' TTLs are real Redis TTLs.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

from soulflow.backends.redis.cron import RedisCronStore
from soulflow.backends.redis.sync_client import StateRedis
from soulflow.contracts import ChatRef
from soulflow.cron import CronService, Job, Schedule
from soulflow.cron.service import cron_inbound_message
from tests.backends.redis_server import RedisServer
from tests.backends.service_stores import fresh_state, state_redis  # noqa: F401

SCALE = 10.0  # scheduler seconds per real second
EVERY_S = 10  # the job's period, in scheduler seconds: one real second
OCCURRENCES = 8
DIES_AT = 3  # scheduler A dies after firing this occurrence (0-based), before advancing it
T0 = datetime(2030, 1, 1, tzinfo=UTC)


class Killed(BaseException):
    """A scheduler's process dying mid-fire: not an Exception, so nothing catches it."""


class ScaledClock:
    def __init__(self) -> None:
        self._t0 = time.monotonic()

    def __call__(self) -> datetime:
        return T0 + timedelta(seconds=(time.monotonic() - self._t0) * SCALE)


async def scaled_sleep(seconds: float) -> None:
    await asyncio.sleep(seconds / SCALE)


class Node:
    """One scheduler: its own client, store, service, thread and event loop."""

    def __init__(self, name: str, url: str, prefix: str, clock: ScaledClock,
                 cluster: Cluster) -> None:
        self.name = name
        self.state = fresh_state(url, prefix)
        self.cluster = cluster
        self.store = GatedStore(self, claim_ttl_s=0.3)
        self.service = CronService(self.store, self.fire, clock=clock, sleep=scaled_sleep,
                                   poll_s=0.5)
        self.stop = threading.Event()
        self.died = threading.Event()
        self.thread = threading.Thread(target=self._main, name=f"cron-{name}", daemon=True)

    def fire(self, job: Job, scheduled: datetime) -> None:
        index = self.cluster.index(scheduled)
        self.cluster.fired.append((self.name, index))
        # what the inbound journal does with the message: its id is accepted once (SET NX)
        message = cron_inbound_message(job, scheduled)
        if self.state.client.set(f"{self.state.prefix}seen:{message.key}", "1", nx=True):
            self.cluster.delivered.append(index)
        if self.name == "a" and index == DIES_AT:
            raise Killed

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except Killed:
            self.died.set()

    async def _run(self) -> None:
        task = asyncio.create_task(self.service.run())
        while not self.stop.is_set() and not task.done():
            await asyncio.sleep(0.02)
        if task.done():
            task.result()  # re-raise Killed
        task.cancel()


class GatedStore(RedisCronStore):
    """Scheduler B leaves occurrence DIES_AT and later to A while A lives, so A is the one that
    dies mid-fire, deterministically (as if A always claimed first); everything else is an
    open race between the two."""

    def __init__(self, node: Node, *, claim_ttl_s: float) -> None:
        super().__init__(node.state, claim_ttl_s=claim_ttl_s)
        self._node = node

    def claim_occurrence(self, job_id: str, stamp: str) -> bool:
        cluster = self._node.cluster
        index = cluster.index(datetime.fromtimestamp(int(stamp), UTC))
        if self._node.name == "b" and index >= DIES_AT and not cluster.a_died():
            return False
        return super().claim_occurrence(job_id, stamp)


class Cluster:
    def __init__(self) -> None:
        self.first: datetime | None = None
        self.fired: list[tuple[str, int]] = []
        self.delivered: list[int] = []
        self.nodes: dict[str, Node] = {}

    def index(self, scheduled: datetime) -> int:
        assert self.first is not None
        offset = (scheduled - self.first).total_seconds()
        assert offset % EVERY_S == 0, f"{scheduled} is not on the job's grid"
        return int(offset // EVERY_S)

    def a_died(self) -> bool:
        return self.nodes["a"].died.is_set()


def wait(predicate: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_two_schedulers_fire_each_time_once_and_survive_a_death(
        state_redis: StateRedis, redis_server: RedisServer) -> None:  # noqa: F811
    clock = ScaledClock()
    cluster = Cluster()
    for name in ("a", "b"):
        cluster.nodes[name] = Node(name, redis_server.url, state_redis.prefix, clock, cluster)
    job = asyncio.run(cluster.nodes["a"].service.add_job(
        name="tick", schedule=Schedule.from_dict({"kind": "every", "every_s": EVERY_S}),
        chat=ChatRef("telegram", "42", None), text="tick"))
    cluster.first = datetime.fromisoformat(job.state.next_run_at or "")
    for node in cluster.nodes.values():
        node.thread.start()
    try:
        wait(lambda: len(cluster.delivered) >= OCCURRENCES, 30.0, "the occurrences")
    finally:
        for node in cluster.nodes.values():
            node.stop.set()
            node.thread.join(timeout=5.0)
    assert cluster.a_died()
    delivered = cluster.delivered[:OCCURRENCES]
    assert delivered == list(range(OCCURRENCES)), cluster.fired  # in order, none twice
    fired_twice = sorted(i for i, n in Counter(i for _, i in cluster.fired).items() if n > 1)
    assert fired_twice == [DIES_AT], cluster.fired  # only the one A died on, fired by B again
    assert ("a", DIES_AT) in cluster.fired and ("b", DIES_AT) in cluster.fired
    assert {name for name, i in cluster.fired if i > DIES_AT} == {"b"}
    stored = RedisCronStore(state_redis).get(job.id)
    assert stored is not None and stored.state.runs >= OCCURRENCES
