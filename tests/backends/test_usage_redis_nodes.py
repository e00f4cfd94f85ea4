"""Model usage with two daemons on one Redis: each node's calls are counted once in the shared
store, both nodes (and `soulflow usage` on either) report the same totals, exactly what the
provider fake reported, and a restarted node keeps them; a budget reached on one node holds
on the other."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends.node_daemons import node_daemons
from tests.backends.redis_server import RedisServer
from tests.e2e.harness import Daemon, wait_for
from tests.fakes.openai_api import FakeOpenAIThread


@pytest.fixture
def two_nodes(tmp_path: Path, fake_llm: FakeOpenAIThread,
              redis_server: RedisServer) -> Iterator[tuple[Daemon, Daemon]]:
    settings = {"SOULFLOW_BACKEND": "redis", "REDIS_URL": redis_server.url,
                "REDIS_KEY_PREFIX": f"u{uuid.uuid4().hex[:8]}:", "REDIS_PARTITIONS": "4",
                "REDIS_LEASE_TTL_S": "3", "CHANNEL_FOLD_MAX": "1"}
    with node_daemons(tmp_path, fake_llm.base_url, **settings) as nodes:
        yield nodes["node-a"], nodes["node-b"]


def test_usage_is_shared_and_exact_across_two_nodes(two_nodes: tuple[Daemon, Daemon],
                                                    fake_llm: FakeOpenAIThread) -> None:
    fake_llm.cost_per_token = 0.000001
    node_a, node_b = two_nodes
    node_a.start()
    node_b.start()
    sent = [(node, node.say(f"{node is node_a} says {n}", chat_id="usage"))
            for n in range(3) for node in (node_a, node_b)]
    for node, message_id in sent:
        node.wait_reply(message_id, chat_id="usage", timeout=30)
    reported = fake_llm.usages
    assert len(reported) == 6
    expected = {"calls": 6, "prompt_tokens": sum(u["prompt_tokens"] for u in reported),
                "completion_tokens": sum(u["completion_tokens"] for u in reported)}
    cost = sum(u["cost"] for u in reported)
    for node in (node_a, node_b):
        total = node.state()["usage"]["total"]
        assert {k: total[k] for k in expected} == expected
        assert total["cost_usd"] == pytest.approx(cost, abs=1e-6)
        chats = {r["key"]: r["calls"] for r in node.state()["usage"]["by"]["chat"]}
        assert chats == {"local:usage@node-a": 3, "local:usage@node-b": 3}
    node_b.kill()
    node_b.start()
    done = node_b.cli("usage", "--json", "--by", "chat")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["total"]["calls"] == 6
    assert node_a.stop() == 0
    assert node_b.stop() == 0


def test_a_budget_spent_on_one_node_holds_on_the_other(tmp_path: Path,
                                                       fake_llm: FakeOpenAIThread,
                                                       redis_server: RedisServer) -> None:
    fake_llm.cost_per_token = 0.001
    settings = {"SOULFLOW_BACKEND": "redis", "REDIS_URL": redis_server.url,
                "REDIS_KEY_PREFIX": f"u{uuid.uuid4().hex[:8]}:", "REDIS_PARTITIONS": "4",
                "REDIS_LEASE_TTL_S": "3", "BUDGET_DAILY_USD": "0.01"}
    with node_daemons(tmp_path, fake_llm.base_url, **settings) as nodes:
        node_a, node_b = nodes["node-a"].start(), nodes["node-b"].start()
        node_a.wait_reply(node_a.say("spend on a", chat_id="x"), chat_id="x", timeout=30)
        node_b.say("ask on b", chat_id="y")
        wait_for(lambda: any("budget reached" in m["content"] and "all chats" in m["content"]
                             for m in node_b.replies("y")), timeout=30,
                 what="node b to see the shared spend")
        assert len(fake_llm.usages) == 1
