"""`soulflow run` with SOULFLOW_BACKEND=redis: a real daemon process on the private redis-server
answers through the local channel, shows its backend in /api/state, and after a SIGKILL in the
middle of a batch a restarted daemon answers every message exactly once (the bus's state is in
Redis: the new process, a new node, takes the dead one's partitions and their unfinished work).
With Redis itself gone for a while the daemon says so (state, problems), takes no new work,
and answers what was said meanwhile once Redis is back.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from soulflow.backends.redis.backend import RedisBackend
from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.keys import partition_of
from soulflow.contracts import OutboundMessage
from tests.backends.node_daemons import node_daemons
from tests.backends.redis_server import RedisServer
from tests.e2e.harness import Daemon, daemon_factory, wait_for
from tests.fakes.openai_api import FakeOpenAIThread
from tests.fakes.rate_limits import TELEGRAM_LIMITS
from tests.fakes.telegram_api import DEFAULT_TOKEN, FakeTelegramThread

TTL_S = "1"  # partition leases: a dead node's chats move after about a second
TELEGRAM_USER = 111111


def redis_settings(url: str) -> dict[str, str]:
    return {"SOULFLOW_BACKEND": "redis", "REDIS_URL": url,
            "REDIS_KEY_PREFIX": f"d{uuid.uuid4().hex[:8]}:", "REDIS_PARTITIONS": "4",
            "REDIS_LEASE_TTL_S": TTL_S, "CHANNEL_FOLD_MAX": "1"}


@pytest.fixture
def redis_daemon(tmp_path: Path, fake_llm: FakeOpenAIThread,
                 redis_server: RedisServer) -> Iterator[Daemon]:
    """A daemon (not started) on the private Redis, under a key prefix of its own."""
    with daemon_factory(tmp_path, fake_llm.base_url,
                        **redis_settings(redis_server.url)) as factory:
        yield factory()


def test_a_daemon_on_redis_answers_and_shows_its_backend(redis_daemon: Daemon) -> None:
    daemon = redis_daemon.start()
    message_id = daemon.say("hello over redis")
    assert daemon.wait_reply(message_id)["content"] == "echo: hello over redis"
    state = daemon.state()
    backend = state["backend"]
    assert backend["kind"] == "redis" and backend["connected"] is True
    assert backend["partitions"] == {"held": [0, 1, 2, 3], "total": 4}  # the only node
    assert ":***@" not in backend["url"] or "s3cret" not in backend["url"]
    wait_for(lambda: daemon.state()["queues"]["inbound_pending"] == 0, what="the count")
    assert daemon.stop() == 0


def test_a_sigkill_mid_batch_loses_nothing_and_answers_nothing_twice(
        redis_daemon: Daemon, fake_llm: FakeOpenAIThread) -> None:
    daemon = redis_daemon.start()
    fake_llm.delay_s = 0.3  # each answer takes a while: the batch is mid-way at the kill
    said = {chat: [daemon.say(f"{chat} n{n}", chat_id=chat) for n in range(3)]
            for chat in ("alpha", "beta", "gamma")}
    wait_for(lambda: any(daemon.replies(chat) for chat in said), what="a first reply")
    answered_before = sum(len(daemon.replies(chat)) for chat in said)
    daemon.kill()
    assert answered_before < 6  # mid-batch: the restarted daemon has work to take over
    fake_llm.delay_s = 0.0
    daemon.start()  # a new process, the same node id (its workspace's): its local chats
    # are back at once (the private partition), its shared leases once they expire
    for chat in said:
        wait_for(lambda chat=chat: len(daemon.replies(chat)) >= 3, timeout=30,
                 what=f"every reply in {chat}")
    for chat, ids in said.items():
        replies = daemon.replies(chat)
        counts = Counter(r["reply_to"] for r in replies)
        assert set(counts) == set(ids), (chat, replies)
        # once each: a reply stored before the kill is found (answered:<key>), one whose send
        # was under way is recognised by the local channel (it ignores a reply id it shows)
        assert list(counts.values()) == [1, 1, 1], (chat, replies)
        assert [r["content"] for r in replies] == [f"echo: {chat} n{n}" for n in range(3)]
    assert daemon.stop() == 0


def _say_or_none(daemon: Daemon, text: str) -> str | None:
    response = daemon.api("POST", "/api/chat", json={"chat_id": "test", "text": text})
    return response.json()["message_id"] if response.status_code == 202 else None


def test_redis_lost_while_running_is_shown_and_work_resumes_when_it_is_back(
        tmp_path: Path, fake_llm: FakeOpenAIThread) -> None:
    """Redis killed under a running daemon: /api/state says so (connected false, a problem
    naming since when, no partitions held: no new work), one log line for the outage, and
    once Redis is back the daemon takes work again."""
    redis = RedisServer(tmp_path / "redis", "--appendonly", "yes", "--appendfsync", "always")
    redis.start()
    try:
        with daemon_factory(tmp_path, fake_llm.base_url, **redis_settings(redis.url),
                            CHANNEL_RESTART_AFTER_FAILURES="1") as factory:
            daemon = factory().start()
            daemon.allow_supervised_crash_on_redis_away()
            assert daemon.wait_reply(daemon.say("before"))["content"] == "echo: before"
            redis.stop()  # kill -9
            state = wait_for(lambda: (s := daemon.state())["backend"]["connected"] is False
                             and s, what="the state to say Redis is unreachable")
            wait_for(lambda: daemon.state()["backend"]["partitions"]["held"] == [],
                     what="the node to stop acting on its partitions (no new work)")
            assert state["ok"] is False
            [problem] = [p for p in state["problems"] if p.startswith("Redis unreachable")]
            assert "since" in problem
            redis.start()
            wait_for(lambda: daemon.state()["backend"]["connected"], what="connected again")
            after = wait_for(lambda: _say_or_none(daemon, "after the outage"), timeout=30,
                             what="the local channel to take messages in again")
            assert daemon.wait_reply(after, timeout=30)["content"] == "echo: after the outage"
            assert [r["content"] for r in daemon.replies()] == ["echo: before",
                                                              "echo: after the outage"]
            log = daemon.log()
            assert log.count("Redis unreachable (") == 1  # one line per outage, not per try
            assert daemon.stop() == 0
    finally:
        redis.stop()


def _chats_over_every_partition(partitions: int) -> list[int]:
    """Telegram supergroup ids whose chats fall one in each partition (so two nodes holding
    half the partitions each certainly share the chats)."""
    found: dict[int, int] = {}
    chat_id = -1005000000000
    while len(found) < partitions:
        chat_id -= 1
        found.setdefault(partition_of(f"telegram:{chat_id}", partitions), chat_id)
    return [found[p] for p in range(partitions)]


def test_two_daemons_on_one_redis_share_the_chats_each_answered_once_in_order(
        tmp_path: Path, fake_llm: FakeOpenAIThread, redis_server: RedisServer) -> None:
    """Two nodes read one Telegram account (one of them at a time: its leader) and answer the
    chats of their own partitions: every message once, each chat's replies in order, and
    both nodes do part of the work."""
    partitions = 4
    with FakeTelegramThread(limits=TELEGRAM_LIMITS.relaxed()) as tg:
        chats = _chats_over_every_partition(partitions)
        for chat in chats:
            tg.add_chat(chat, "supergroup", title=f"shared {chat}")
        settings = {**redis_settings(redis_server.url), "REDIS_PARTITIONS": str(partitions),
                    "REDIS_LEASE_TTL_S": "2", "TELEGRAM_API_URL": tg.url,
                    "TELEGRAM_BOT_TOKEN": DEFAULT_TOKEN, "CHANNEL_POLL_TIMEOUT_S": "1",
                    "TELEGRAM_ALLOWED_USERS": str(TELEGRAM_USER)}
        with node_daemons(tmp_path, fake_llm.base_url, **settings) as by_name:
            nodes = list(by_name.values())
            for node in nodes:
                node.start()
            wait_for(lambda: all(n.state()["backend"]["partitions"]["held"] for n in nodes),
                     what="both nodes holding partitions")
            for n in range(3):
                for chat in chats:
                    tg.push_message(chat, f"@soulflow_test_bot {chat} m{n}",
                                    from_id=TELEGRAM_USER, chat_type="supergroup")
            for chat in chats:
                wait_for(lambda chat=chat: len(tg.sent_texts(chat)) >= 3, timeout=30,
                         what=f"three replies in {chat}")
            for chat in chats:
                assert tg.sent_texts(chat) == [f"echo: {chat} m{n}" for n in range(3)]
            answered = [n.state()["counters"]["answered"] for n in nodes]
            assert sum(answered) == 3 * len(chats) and all(answered), answered
            held = [set(n.state()["backend"]["partitions"]["held"]) for n in nodes]
            assert not held[0] & held[1] and held[0] | held[1] == set(range(partitions))
            for node in nodes:
                assert node.stop() == 0


def test_the_dlq_commands_work_on_redis_without_a_daemon(redis_daemon: Daemon,
                                                        redis_server: RedisServer) -> None:
    """`soulflow dlq` with no daemon running opens the configured backend: the dead letters
    in Redis are listed, and a replay puts them in Redis's outbox (sent by whichever node
    holds the chat); the command takes no partition of chats."""
    env = redis_daemon.env

    async def seed() -> None:
        backend = RedisBackend(AsyncStoreRedis.from_url(redis_server.url), node_id="seed",
                               prefix=env["REDIS_KEY_PREFIX"],
                               partitions=int(env["REDIS_PARTITIONS"]))
        for n in range(2):
            await backend.dlq.add(OutboundMessage(provider="local", chat_id="test",
                                                  content=f"dead {n}", message_id=f"o{n}"),
                                  retry_count=3, error="gave up")
        await backend.client.aclose()

    asyncio.run(seed())
    listed = redis_daemon.cli("dlq", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["content"] for line in listed.stdout.decode().splitlines()] == \
        ["dead 0", "dead 1"]
    replayed = redis_daemon.cli("dlq", "replay", "o1")
    assert replayed.returncode == 0 and b"Replayed 1" in replayed.stdout, replayed.stderr

    async def check() -> tuple[int, list[str], int]:
        backend = RedisBackend(AsyncStoreRedis.from_url(redis_server.url), node_id="check",
                               prefix=env["REDIS_KEY_PREFIX"],
                               partitions=int(env["REDIS_PARTITIONS"]))
        try:
            return (await backend.outbox.count(),
                    [e.message.message_id for e in await backend.dlq.entries()],
                    int(await backend.client.zcard(backend.keys.nodes)))
        finally:
            await backend.client.aclose()

    assert asyncio.run(check()) == (1, ["o0"], 0)  # no node joined
    daemon = redis_daemon.start()  # the daemon sends the replayed letter
    wait_for(lambda: [r["content"] for r in daemon.replies()] == ["dead 1"],
             what="the replayed letter sent")
    assert daemon.stop() == 0
