"""Daemons and a Redis that fails under them (issue 12): Redis itself SIGKILLed and restarted
mid-flood with AOF `appendfsync always` loses nothing and keeps each chat in order; a daemon cut
off from Redis by the network stops reading the platform account before its lease can expire,
so another node takes over without two readers ever polling at once (fencing, at the daemon
level).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from tests.backends.daemon_cluster import Cluster, TelegramChats, long_polling_since
from tests.backends.proxy import ProxyThread
from tests.backends.redis_server import RedisServer
from tests.fakes.openai_api import FakeOpenAIThread
from tests.fakes.telegram_api import FakeTelegramThread

CHATS = 10
pytestmark = pytest.mark.timeout(180)


def make_cluster(tmp_path: Path, redis_url: str, llm: FakeOpenAIThread,
                 chats: TelegramChats, lease_ttl_s: float) -> Cluster:
    return Cluster(tmp_path, redis_url=redis_url, llm_url=llm.base_url,
                   prefix=f"e2e{uuid.uuid4().hex[:8]}:", platform_env=chats.env(),
                   node_env=chats.node_env, lease_ttl_s=lease_ttl_s)


def test_redis_killed_and_restarted_mid_flood_loses_nothing(
        tmp_path: Path, durable_redis: RedisServer, fake_llm: FakeOpenAIThread,
        telegram: FakeTelegramThread) -> None:
    rounds = 6
    fake_llm.delay_s = 0.2  # turns take a while: Redis dies under several of them
    chats = TelegramChats(telegram, CHATS)
    nodes = make_cluster(tmp_path, durable_redis.url, fake_llm, chats, lease_ttl_s=3.0)
    try:
        members = [nodes.add(f"node{i}") for i in range(2)]
        for member in members:
            member.daemon.allow_supervised_crash_on_redis_away()
        nodes.start(members)
        nodes.wait_one_leader()
        nodes.wait(lambda: long_polling_since(telegram, 0.0), 30, "the reader to long-poll")
        for round_ in range(3):
            chats.post_round(round_)
        nodes.wait(lambda: len(telegram.sent_texts()) >= CHATS, 30, "the flood under way")
        unanswered = len(chats.missing(range(3)))
        durable_redis.stop()  # SIGKILL, mid-flood: replies are being produced and sent
        nodes.wait(lambda: not nodes.leaders(), 30,
                   "the reader to stop reading while Redis is away")
        chats.post_round(3)  # waits on the platform: nobody reads it while Redis is away
        durable_redis.start()  # same port, state from the append-only file
        for round_ in range(4, rounds):
            chats.post_round(round_)
        nodes.wait_answered(chats, range(rounds), 60)
        assert all(node.alive for node in members)
        assert unanswered > 0  # Redis died mid-flood
    finally:
        nodes.close()
    duplicates = 0
    for chat, texts in chats.all_replies().items():
        expected = [f"echo: {chats.text(chat, n)}" for n in range(rounds)]
        assert list(dict.fromkeys(texts)) == expected, (chat, texts)  # all, in order
        # at most what the chat had in hand when Redis died: a turn and a reply being sent
        assert len(texts) - rounds <= 2, (chat, texts)
        duplicates += len(texts) - rounds
    print(f"redis restart: {rounds * CHATS} messages, {unanswered} unanswered when Redis "
          f"died, {duplicates} duplicate replies")


def test_a_daemon_cut_off_from_redis_stops_reading_before_its_lease_expires(
        tmp_path: Path, redis_server: RedisServer, fake_llm: FakeOpenAIThread,
        telegram: FakeTelegramThread) -> None:
    ttl = 6.0  # a third of it (2 s) outlasts a dead reader's last long poll (1 s)
    chats = TelegramChats(telegram, CHATS)
    proxy = ProxyThread(redis_server.port)
    nodes = make_cluster(tmp_path, redis_server.url, fake_llm, chats, lease_ttl_s=ttl)
    try:
        cut = nodes.add("cut", REDIS_URL=proxy.url)
        cut.start()
        assert nodes.wait_one_leader() is cut
        other = nodes.add("other").start()
        nodes.wait(lambda: long_polling_since(telegram, 0.0), 30, "the reader to long-poll")
        chats.post_round(0)
        nodes.wait(lambda: not chats.missing([0]), 30, "the first round answered")

        proxy.blackhole()  # packets to and from Redis dropped: `cut` only has its timeouts
        cut_at = time.time()
        nodes.wait(lambda: not cut.leads, 60, "the cut-off node to stop reading")
        polls_after_stop = chats.polls()["cut"]
        chats.post_round(1)
        nodes.wait(lambda: other.leads, 60, "the other node to take the account")
        nodes.wait(lambda: not chats.missing([0, 1]), 30, "the second round answered")
        assert cut.alive  # it waits for Redis; it did not crash
        stopped = cut.logged_at("stopped reading the account")[0] - cut_at
        took = other.logged_at("reads the account now")[0] - cut_at
        # the order, from each daemon's own log: the cut-off node had stopped before the
        # other one could start (its lease outlives its own deadline, however busy the box)
        assert took > stopped
        assert chats.polls()["cut"] == polls_after_stop  # it never polled again
        # and at the platform: no long poll was ever superseded while its poller still
        # listened (the fake counts such a 409), so two readers never overlapped
        assert chats.conflicts() == 0
    finally:
        nodes.close()
        proxy.close()
    print(f"fencing: stopped reading {stopped:.2f} s after the cut, "
          f"the other node read from {took:.2f} s (lease TTL {ttl:g} s)")
