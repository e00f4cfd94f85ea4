"""Two `soulflow run` daemons on one Redis against the Telegram fake: a cron job added through
one node's CLI fires once per scheduled time across both (its answer posted once per time), and
when one node is SIGKILLed the other goes on firing it; one node at a time holds `service:ops`
(the run watchdog, the decision dedupe), and a clean stop hands it to the other, with the
heartbeat's chat."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from soulflow.backends.redis.cron import RedisCronStore
from soulflow.backends.redis.sync_client import StateRedis, sync_client
from tests.backends.daemon_cluster import Cluster, TelegramChats
from tests.backends.redis_server import RedisServer
from tests.fakes.openai_api import FakeOpenAIThread
from tests.fakes.telegram_api import FakeTelegramThread

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def cluster(tmp_path: Path, redis_server: RedisServer, fake_llm: FakeOpenAIThread,
            telegram: FakeTelegramThread) -> Iterator[tuple[Cluster, TelegramChats, StateRedis]]:
    chats = TelegramChats(telegram, 1)
    prefix = f"svc{uuid.uuid4().hex[:8]}:"
    built = Cluster(tmp_path, redis_url=redis_server.url, llm_url=fake_llm.base_url,
                    prefix=prefix, platform_env=chats.env(), node_env=chats.node_env,
                    lease_ttl_s=2.0, HEARTBEAT_INTERVAL="0")
    state = StateRedis(sync_client(redis_server.url), prefix)
    try:
        yield built, chats, state
    finally:
        built.close()
        state.close()


def test_a_cron_job_fires_once_per_time_across_daemons_and_outlives_a_kill(
        cluster: tuple[Cluster, TelegramChats, StateRedis]) -> None:
    nodes, chats, state = cluster
    a, b = nodes.add("a"), nodes.add("b")
    nodes.start([a, b])
    added = a.daemon.cli("cron", "add", "--chat", f"telegram:{chats.ids[0]}", "--every", "10s",
                         "--name", "tick", "--json", "tick")
    assert added.returncode == 0, added.stderr.decode()
    job_id = json.loads(added.stdout)["job"]["id"]
    store = RedisCronStore(state)

    def runs() -> int:
        job = store.get(job_id)
        return job.state.runs if job is not None else 0

    def fired() -> int:
        return sum(node.daemon.state()["cron"]["fired"] for node in (a, b) if node.alive)

    def ticks_answered() -> int:
        return chats.replies(0).count("echo: tick")

    nodes.wait(lambda: runs() >= 2 or None, 60, "two occurrences")
    # between two fires: each time fired on exactly one node, and answered once
    nodes.wait(lambda: (fired() == runs() and ticks_answered() == runs()) or None, 30,
               "each occurrence fired and answered once")
    before = runs()
    assert a.daemon.state()["cron"]["jobs"] == b.daemon.state()["cron"]["jobs"] == 1
    a.kill()
    nodes.wait(lambda: runs() >= before + 2 or None, 60, "node b to go on firing")
    nodes.wait(lambda: ticks_answered() == runs() or None, 30, "every occurrence answered")
    assert set(chats.replies(0)) == {"echo: tick"}
    assert b.daemon.state()["cron"]["fired"] >= 2
    assert b.daemon.stop() == 0


def test_one_daemon_holds_the_ops_lease_and_hands_it_over(
        cluster: tuple[Cluster, TelegramChats, StateRedis]) -> None:
    nodes, _, state = cluster
    a, b = nodes.add("a"), nodes.add("b")
    nodes.start([a, b])

    def leaders() -> list[str]:
        return [n.name for n in (a, b) if n.daemon.state()["ops"]["leader"]]

    [leader] = nodes.wait(lambda: leaders() if len(leaders()) == 1 else None, 30,
                          "one node to hold service:ops")
    holder = state.client.get(f"{state.prefix}lease:service:ops")
    assert holder is not None and holder.decode().startswith(f"{leader}|")
    other = b if leader == "a" else a
    (a if leader == "a" else b).daemon.stop()
    nodes.wait(lambda: other.daemon.state()["ops"]["leader"] or None, 30,
               "the other node to take service:ops over")
    # the heartbeat follows its chat: the node left holds every partition, that chat's too
    nodes.wait(lambda: other.daemon.state()["heartbeat"]["runs_here"] or None, 30,
               "the other node to hold the heartbeat's chat")
