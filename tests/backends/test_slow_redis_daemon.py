"""A Redis that answers late (far away, or overloaded) slows the chats it holds, never the rest
of the daemon: while a turn waits on a Redis 0.3 s away each way, the dashboard answers at
once. The agent's stores write behind and read ahead on the asynchronous client
(backends/redis/writeback.py), so no store call holds the event loop; a single call that did
would hold every probe below for 0.6 s."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from tests.backends.node_daemons import node_daemons
from tests.backends.proxy import ProxyThread
from tests.backends.redis_server import RedisServer
from tests.fakes.openai_api import FakeOpenAIThread

pytestmark = pytest.mark.timeout(120)

ONE_WAY_S = 0.3


def test_a_slow_redis_slows_its_chats_never_the_dashboard(
        tmp_path: Path, fake_llm: FakeOpenAIThread, redis_server: RedisServer) -> None:
    proxy = ProxyThread(redis_server.port)
    try:
        settings = {"SOULFLOW_BACKEND": "redis", "REDIS_URL": proxy.url,
                    "REDIS_KEY_PREFIX": f"slow{uuid.uuid4().hex[:8]}:",
                    "REDIS_PARTITIONS": "4", "STREAM_REPLIES": "off",
                    # leases sized for a Redis this far away: renewed in time, never moved
                    "REDIS_LEASE_TTL_S": "20"}
        with node_daemons(tmp_path, fake_llm.base_url, ("node-a",), **settings) as nodes:
            node = nodes["node-a"].start()
            node.wait_reply(node.say("warm up", chat_id="slow"), chat_id="slow", timeout=30)
            proxy.delay(ONE_WAY_S)
            started = time.monotonic()
            message_id = node.say("hello", chat_id="slow")
            probes: list[float] = []
            while not any(m.get("reply_to") == message_id for m in node.replies("slow")):
                assert time.monotonic() - started < 60, "no reply through the slow Redis"
                sent = time.monotonic()
                assert node.api("GET", "/healthz").status_code == 200
                probes.append(time.monotonic() - sent)
                time.sleep(0.05)
            took = time.monotonic() - started
            proxy.delay(0)
            assert took > 4 * ONE_WAY_S, "the turn did not wait for Redis at all"
            assert len(probes) >= 5
            assert max(probes) < 2 * ONE_WAY_S, \
                f"the dashboard waited {max(probes):.2f} s: something held the event loop"
            assert node.stop() == 0
    finally:
        proxy.close()
