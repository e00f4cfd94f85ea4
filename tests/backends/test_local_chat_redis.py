"""The local chat of each node on one Redis (two `soulflow run` daemons, workspaces of their own):
typed on a node, answered by that node, shown on that node, with a history of its own; a node
SIGKILLed mid-answer answers after its restart (same SOULFLOW_NODE_ID), never the other node."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.backends.node_daemons import node_daemons
from tests.backends.redis_server import RedisServer
from tests.e2e.harness import Daemon, wait_for
from tests.fakes.openai_api import FakeOpenAIThread


@pytest.fixture
def two_nodes(tmp_path: Path, fake_llm: FakeOpenAIThread,
              redis_server: RedisServer) -> Iterator[tuple[Daemon, Daemon]]:
    """Daemons node-a and node-b (not started): one Redis key prefix, one workspace each."""
    settings = {"SOULFLOW_BACKEND": "redis", "REDIS_URL": redis_server.url,
                "REDIS_KEY_PREFIX": f"l{uuid.uuid4().hex[:8]}:", "REDIS_PARTITIONS": "4",
                "REDIS_LEASE_TTL_S": "3", "CHANNEL_FOLD_MAX": "1"}
    with node_daemons(tmp_path, fake_llm.base_url, **settings) as nodes:
        yield nodes["node-a"], nodes["node-b"]


def contents(daemon: Daemon, role: str, chat_id: str = "dashboard") -> list[str]:
    return [m["content"] for m in daemon.transcript(chat_id) if m["role"] == role]


def prompts_with(fake_llm: FakeOpenAIThread, text: str) -> list[list[dict[str, Any]]]:
    """The message lists of the model requests whose last message is `text`."""
    return [r.json["messages"] for r in fake_llm.requests
            if r.json["messages"][-1].get("content") == text]


def test_each_node_answers_its_own_local_chat_with_a_history_of_its_own(
        two_nodes: tuple[Daemon, Daemon], fake_llm: FakeOpenAIThread) -> None:
    node_a, node_b = two_nodes
    node_a.start()
    node_b.start()
    said: dict[str, list[tuple[Daemon, str]]] = {"node-a": [], "node-b": []}
    for n in range(4):  # interleaved, one chat id on both: "dashboard"
        for name, node in (("node-a", node_a), ("node-b", node_b)):
            said[name].append((node, node.say(f"{name} says {n}", chat_id="dashboard")))
    for name, messages in said.items():
        for node, message_id in messages:
            reply = node.wait_reply(message_id, chat_id="dashboard", timeout=30)
            assert reply["content"].startswith(f"echo: {name} says")
    for name, node in (("node-a", node_a), ("node-b", node_b)):
        assert contents(node, "user") == [f"{name} says {n}" for n in range(4)]
        assert contents(node, "assistant") == [f"echo: {name} says {n}" for n in range(4)]
        assert node.state()["counters"]["answered"] == 4  # each answered its own, all of them
        backend = node.state()["backend"]
        assert backend["private_partition"] == {"name": f"node:{name}", "held": True}
        # the model saw this node's conversation only: its own earlier turns, none of the other's
        prompt = prompts_with(fake_llm, f"{name} says 3")[-1]
        said_before = [m["content"] for m in prompt if m["role"] == "user"]
        assert f"{name} says 2" in said_before
        other = "node-b" if name == "node-a" else "node-a"
        assert not any(other in str(m.get("content")) for m in prompt)
    # `soulflow chat` talks to the node it runs beside
    done = node_b.cli("chat", "--chat-id", "dashboard", input=b"typed in the terminal\n")
    assert done.returncode == 0, done.stderr
    assert "echo: typed in the terminal" in done.stdout.decode()
    assert "typed in the terminal" not in str(node_a.transcript("dashboard"))
    assert node_a.stop() == 0
    assert node_b.stop() == 0


def test_a_killed_node_answers_its_local_message_after_restart_never_the_other(
        two_nodes: tuple[Daemon, Daemon], fake_llm: FakeOpenAIThread) -> None:
    node_a, node_b = two_nodes
    node_a.start()
    node_b.start()
    first = node_a.say("remember: the code is 7", chat_id="ops")
    assert node_a.wait_reply(first, chat_id="ops")["content"] == "echo: remember: the code is 7"
    fake_llm.script_delay(60)  # A's next turn hangs in the model: A dies mid-answer
    pending = node_a.say("what is the code?", chat_id="ops")
    wait_for(lambda: prompts_with(fake_llm, "what is the code?"), what="A's turn to start")
    node_a.kill()
    # B goes on with its own chat and holds every shared partition; A's message waits for A
    wait_for(lambda: node_b.state()["backend"]["partitions"]["held"] == [0, 1, 2, 3],
             timeout=30, what="B to take every shared partition")
    on_b = node_b.say("B is still here", chat_id="ops")
    assert node_b.wait_reply(on_b, chat_id="ops")["content"] == "echo: B is still here"
    node_a.start()  # same workspace, same SOULFLOW_NODE_ID
    reply = node_a.wait_reply(pending, chat_id="ops", timeout=30)
    assert reply["content"] == "echo: what is the code?"
    assert [m.get("reply_to") for m in node_a.replies("ops")] == [first, pending]  # once each
    assert contents(node_b, "user", "ops") == ["B is still here"]
    assert contents(node_b, "assistant", "ops") == ["echo: B is still here"]
    assert node_b.state()["counters"]["answered"] == 1
    # A's history came back with it: the first turn is in the prompt of the answered one
    prompt = prompts_with(fake_llm, "what is the code?")[-1]
    assert "remember: the code is 7" in [m["content"] for m in prompt if m["role"] == "user"]
    assert not any("B is still here" in str(m.get("content")) for m in prompt)
    assert node_a.stop() == 0
    assert node_b.stop() == 0
