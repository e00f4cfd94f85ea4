"""Two `soulflow run` daemons with workspaces of their own on one Redis: an agent run that
daemon A was in the middle of is finished by daemon B after A is SIGKILLed.

Nothing of the run is in either workspace: its journal, the chat's session and the approval
prompts are in Redis, so B (another machine, as far as the state goes) takes A's chats over
when A's partition leases expire and goes on with the same rules as a restarted daemon:
- a tool call A had started is reported to the model as interrupted, not run again;
- an approval A asked for is decided by a reply that reaches B, and the call runs on B.

The chats are Telegram chats (the loopback fake): a node's local chat is its own and never
moves to another node (tests/backends/test_local_chat_redis.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from soulflow.backends.redis.keys import partition_of
from tests.backends.daemon_cluster import long_polling_since
from tests.backends.node_daemons import node_daemons
from tests.backends.redis_server import RedisServer
from tests.e2e.harness import Daemon, wait_for
from tests.fakes.openai_api import FakeOpenAIThread
from tests.fakes.rate_limits import TELEGRAM_LIMITS
from tests.fakes.telegram_api import DEFAULT_TOKEN, FakeTelegramThread

USER = 111111  # its private chat with the bot has the user's id
GROUPS = [-1005000000000 - n for n in range(1, 40)]  # supergroups to pick a partition from


@pytest.fixture
def telegram() -> Iterator[FakeTelegramThread]:
    with FakeTelegramThread(limits=TELEGRAM_LIMITS.relaxed()) as tg:
        for chat in GROUPS:
            tg.add_chat(chat, "supergroup", title=f"group {chat}")
        yield tg


@pytest.fixture
def two_nodes(tmp_path: Path, fake_llm: FakeOpenAIThread, redis_server: RedisServer,
              telegram: FakeTelegramThread) -> Iterator[tuple[Daemon, Daemon]]:
    """Daemons A and B (not started): one Redis key prefix, one Telegram account, one
    workspace each."""
    settings = {"SOULFLOW_BACKEND": "redis", "REDIS_URL": redis_server.url,
                "REDIS_KEY_PREFIX": f"r{uuid.uuid4().hex[:8]}:", "REDIS_PARTITIONS": "4",
                "REDIS_LEASE_TTL_S": "1", "TELEGRAM_API_URL": telegram.url,
                "TELEGRAM_BOT_TOKEN": DEFAULT_TOKEN, "TELEGRAM_ALLOWED_USERS": str(USER),
                "CHANNEL_POLL_TIMEOUT_S": "1"}
    with node_daemons(tmp_path, fake_llm.base_url, **settings) as nodes:
        yield nodes["node-a"], nodes["node-b"]


def reading(tg: FakeTelegramThread) -> None:
    """Wait for a long poll: the first start's priming read (which drops what was posted
    before the bot ever read) is over."""
    wait_for(lambda: long_polling_since(tg, 0.0), what="a getUpdates long poll")


def post(tg: FakeTelegramThread, text: str, chat: int = USER) -> None:
    """The user writes to the bot: in its private chat, or mentioning it in a group."""
    if chat == USER:
        tg.push_message(USER, text)
    else:
        tg.push_message(chat, f"@soulflow_test_bot {text}", from_id=USER,
                        chat_type="supergroup")


def sent(tg: FakeTelegramThread, chat: int = USER) -> list[str]:
    return tg.sent_texts(chat)


def test_a_run_cut_off_mid_tool_is_finished_by_the_other_daemon(
        two_nodes: tuple[Daemon, Daemon], fake_llm: FakeOpenAIThread,
        telegram: FakeTelegramThread) -> None:
    node_a, node_b = two_nodes
    node_a.start()
    reading(telegram)
    fake_llm.script_tool_call("exec", {"command": "echo run >> \"$HOME/ran.txt\"; sleep 30"})
    fake_llm.script_reply("The command was interrupted; I did not run it again.")
    post(telegram, "run the long job")
    marker = wait_for(lambda: ran(node_a), what="the tool to start on A")
    node_a.kill()
    node_b.start()
    wait_for(lambda: "The command was interrupted; I did not run it again." in sent(telegram),
             timeout=30, what="B to finish the run")
    assert marker.read_text() == "run\n"  # not run a second time, on A or on B
    assert ran(node_b) is None
    assert "interrupted" in fake_llm.requests[-1].json["messages"][-1]["content"]
    wait_for(lambda: node_b.state()["queues"]["inbound_pending"] == 0, what="nothing pending")
    assert sent(telegram).count("The command was interrupted; I did not run it again.") == 1
    assert node_b.stop() == 0


def ran(daemon: Daemon) -> Path | None:
    """The file the long exec command writes in its chat's folder (exec's HOME)."""
    return next(daemon.workspace.glob("chats/*/ran.txt"), None)


def held(daemon: Daemon) -> set[int]:
    return set(daemon.state()["backend"]["partitions"]["held"])


def chat_held_by(node_a: Daemon, node_b: Daemon) -> int:
    """A group chat whose partition A holds, once both daemons share the partitions."""
    wait_for(lambda: len(held(node_a)) == 2 and held(node_a) | held(node_b) == {0, 1, 2, 3},
             what="the partitions shared between the two daemons")
    return next(c for c in GROUPS if partition_of(f"telegram:{c}", 4) in held(node_a))


def test_a_run_driven_after_its_message_was_answered_is_resumed_on_takeover(
        two_nodes: tuple[Daemon, Daemon], fake_llm: FakeOpenAIThread,
        telegram: FakeTelegramThread) -> None:
    """Approved from A's dashboard, the run goes on with no message pending (its own was
    answered by the approval request): when A dies mid-tool, nothing would bring it back but
    B's "agent:takeover" loop, which resumes it once B comes to hold the chat."""
    node_a, node_b = two_nodes
    node_a.start()
    node_b.start()
    chat = chat_held_by(node_a, node_b)
    reading(telegram)
    fake_llm.script_tool_call("exec", {"command": "echo run >> \"$HOME/ran.txt\"; sleep 30",
                                       "network": True})  # always asks for approval
    fake_llm.script_reply("It was cut off; I did not run it again.")
    post(telegram, "fetch something slowly", chat)
    approval = wait_for(lambda: next(iter(node_a.state()["approvals"]), None),
                        what="the approval on A")
    assert node_a.api("POST", "/api/approvals/decide", json={
        "run_id": approval["run_id"], "approval_id": approval["approval_id"],
        "decision": "approve"}).status_code == 200
    marker = wait_for(lambda: ran(node_a), what="the approved tool to start on A")
    wait_for(lambda: node_a.state()["queues"]["inbound_pending"] == 0,
             what="no message pending for the run")
    node_a.kill()
    wait_for(lambda: "It was cut off; I did not run it again." in sent(telegram, chat),
             timeout=30, what="B to resume the run and answer")
    assert marker.read_text() == "run\n"
    assert "interrupted" in fake_llm.requests[-1].json["messages"][-1]["content"]
    assert "resumed 1 run(s) left running in chats taken over" in node_b.log()
    assert node_b.stop() == 0


def test_an_approval_asked_by_a_killed_daemon_is_decided_on_the_other(
        two_nodes: tuple[Daemon, Daemon], fake_llm: FakeOpenAIThread,
        telegram: FakeTelegramThread) -> None:
    node_a, node_b = two_nodes
    node_a.start()
    reading(telegram)
    group = GROUPS[0]
    # posting in another chat: an approval the requester herself decides, on B, from the
    # run's journal in Redis
    fake_llm.script_tool_call("message", {"text": "step 1", "chat": {"provider": "telegram",
                                                                     "chat_id": group}})
    fake_llm.script_reply("Posted your plan.")
    post(telegram, "post my plan in the group")
    prompt = wait_for(lambda: next((t for t in sent(telegram)
                                    if t.startswith("Approval needed")), None),
                      what="the approval request on A")
    node_a.kill()
    node_b.start()
    post(telegram, "approve")
    wait_for(lambda: "Posted your plan." in sent(telegram), timeout=30,
             what="B to decide and finish the run")
    wait_for(lambda: "step 1" in sent(telegram, group), what="the approved message")
    assert sent(telegram, group).count("step 1") == 1
    assert "ap_" in prompt
    requests = fake_llm.requests
    assert requests[-1].json["messages"][-1]["role"] == "tool"
    assert node_b.stop() == 0


def test_a_run_is_decided_on_the_daemon_that_holds_its_chat(
        two_nodes: tuple[Daemon, Daemon], fake_llm: FakeOpenAIThread,
        telegram: FakeTelegramThread) -> None:
    """Both daemons list the approval (the runs are shared); only the one holding the chat
    acts on it, the other's dashboard says where to go instead of pretending."""
    node_a, node_b = two_nodes
    node_a.start()
    node_b.start()
    chat = chat_held_by(node_a, node_b)
    reading(telegram)
    fake_llm.script_tool_call("write_file", {"path": "notes/a.txt", "content": "from A"})
    fake_llm.script_reply("Done.")
    post(telegram, "write notes/a.txt", chat)
    approval = wait_for(lambda: next((a for a in node_b.state()["approvals"]
                                      if a["chat_id"] == str(chat)), None),
                        what="the approval, listed by B too")
    body = {"run_id": approval["run_id"], "approval_id": approval["approval_id"],
            "decision": "approve"}
    refused = node_b.api("POST", "/api/approvals/decide", json=body)
    assert refused.status_code == 409 and "another node holds" in refused.text
    assert node_a.api("POST", "/api/approvals/decide", json=body).status_code == 200
    wait_for(lambda: "Done." in sent(telegram, chat), what="the run's answer on A")
    assert (node_a.workspace / "notes" / "a.txt").read_text() == "from A"
    assert node_a.stop() == 0 and node_b.stop() == 0


def test_the_conversation_goes_on_where_the_chat_goes(
        two_nodes: tuple[Daemon, Daemon], fake_llm: FakeOpenAIThread,
        telegram: FakeTelegramThread) -> None:
    """The history the model sees comes from the session in Redis: what was said to A is in
    B's prompt after A died."""
    node_a, node_b = two_nodes
    node_a.start()
    reading(telegram)
    post(telegram, "my name is Ada")
    wait_for(lambda: "echo: my name is Ada" in sent(telegram), what="A's answer")
    node_a.kill()
    node_b.start()
    post(telegram, "what is my name?")
    wait_for(lambda: "echo: what is my name?" in sent(telegram), timeout=30,
             what="B's answer")
    said = [(m["role"], m["content"]) for m in fake_llm.requests[-1].json["messages"]
            if m["role"] != "system"]
    assert said[-3:] == [("user", "my name is Ada"), ("assistant", "echo: my name is Ada"),
                         ("user", "what is my name?")]
    for node in (node_a, node_b):  # nothing of it in either workspace
        for kept in ("sessions", "threads"):
            directory = node.workspace / "runtime" / kept
            assert not directory.exists() or not any(directory.iterdir()), directory
    assert node_b.stop() == 0
