"""Two `soulflow run` daemons with workspaces of their own on one Redis: an agent run that
daemon A was in the middle of is finished by daemon B after A is SIGKILLed.

Nothing of the run is in either workspace: its journal, the chat's session and the approval
prompts are in Redis, so B (another machine, as far as the state goes) takes A's chats over
when A's partition leases expire and goes on with the same rules as a restarted daemon:
- a tool call A had started is reported to the model as interrupted, not run again;
- an approval A asked for is decided by a reply that reaches B, and the call runs on B.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from soulflow.backends.redis.keys import partition_of
from tests.backends.redis_server import RedisServer
from tests.e2e.harness import Daemon, daemon_factory, wait_for
from tests.fakes.openai_api import FakeOpenAIThread


@pytest.fixture
def two_nodes(tmp_path: Path, fake_llm: FakeOpenAIThread,
              redis_server: RedisServer) -> Iterator[tuple[Daemon, Daemon]]:
    """Daemons A and B (not started): one Redis key prefix, one workspace each."""
    settings = {"SOULFLOW_BACKEND": "redis", "REDIS_URL": redis_server.url,
                "REDIS_KEY_PREFIX": f"r{uuid.uuid4().hex[:8]}:", "REDIS_PARTITIONS": "4",
                "REDIS_LEASE_TTL_S": "1"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with ExitStack() as stack:
        node_a = stack.enter_context(daemon_factory(tmp_path / "a", fake_llm.base_url,
                                                    **settings))()
        node_b = stack.enter_context(daemon_factory(tmp_path / "b", fake_llm.base_url,
                                                    **settings))()
        yield node_a, node_b


def replies_to(daemon: Daemon, message_id: str) -> list[str]:
    return [m["content"] for m in daemon.replies() if m.get("reply_to") == message_id]


def test_a_run_cut_off_mid_tool_is_finished_by_the_other_daemon(
        two_nodes: tuple[Daemon, Daemon], fake_llm: FakeOpenAIThread) -> None:
    node_a, node_b = two_nodes
    node_a.start()
    marker = node_a.workspace / "ran.txt"
    fake_llm.script_tool_call("exec", {"command": "echo run >> ran.txt; sleep 30"})
    fake_llm.script_reply("The command was interrupted; I did not run it again.")
    message_id = node_a.say("run the long job")
    wait_for(lambda: marker.exists(), what="the tool to start on A")
    node_a.kill()
    node_b.start()
    reply = node_b.wait_reply(message_id, timeout=30)
    assert reply["content"] == "The command was interrupted; I did not run it again."
    assert marker.read_text() == "run\n"  # not run a second time, on A or on B
    assert not (node_b.workspace / "ran.txt").exists()
    assert "interrupted" in fake_llm.requests[-1].json["messages"][-1]["content"]
    wait_for(lambda: node_b.state()["queues"]["inbound_pending"] == 0, what="nothing pending")
    assert replies_to(node_b, message_id) == [reply["content"]]  # answered once
    assert node_b.stop() == 0


def held(daemon: Daemon) -> set[int]:
    return set(daemon.state()["backend"]["partitions"]["held"])


def chat_held_by(node_a: Daemon, node_b: Daemon) -> str:
    """A local chat whose partition A holds, once both daemons share the partitions."""
    wait_for(lambda: len(held(node_a)) == 2 and held(node_a) | held(node_b) == {0, 1, 2, 3},
             what="the partitions shared between the two daemons")
    return next(f"c{n}" for n in range(100) if partition_of(f"local:c{n}", 4) in held(node_a))


def test_a_run_driven_after_its_message_was_answered_is_resumed_on_takeover(
        two_nodes: tuple[Daemon, Daemon], fake_llm: FakeOpenAIThread) -> None:
    """Approved from A's dashboard, the run goes on with no message pending (its own was
    answered by the approval request): when A dies mid-tool, nothing would bring it back but
    B's "agent:takeover" loop, which resumes it once B comes to hold the chat."""
    node_a, node_b = two_nodes
    node_a.start()
    node_b.start()
    chat = chat_held_by(node_a, node_b)
    marker = node_a.workspace / "ran.txt"
    fake_llm.script_tool_call("exec", {"command": "echo run >> ran.txt; sleep 30",
                                       "network": True})  # always asks for approval
    fake_llm.script_reply("It was cut off; I did not run it again.")
    node_a.say("fetch something slowly", chat_id=chat)
    approval = wait_for(lambda: next(iter(node_a.state()["approvals"]), None),
                        what="the approval on A")
    assert node_a.api("POST", "/api/approvals/decide", json={
        "run_id": approval["run_id"], "approval_id": approval["approval_id"],
        "decision": "approve"}).status_code == 200
    wait_for(lambda: marker.exists(), what="the approved tool to start on A")
    wait_for(lambda: node_a.state()["queues"]["inbound_pending"] == 0,
             what="no message pending for the run")
    node_a.kill()
    wait_for(lambda: "It was cut off; I did not run it again." in
             [m["content"] for m in node_b.replies(chat)], timeout=30,
             what="B to resume the run and answer")
    assert marker.read_text() == "run\n"
    assert "interrupted" in fake_llm.requests[-1].json["messages"][-1]["content"]
    assert "resumed 1 run(s) left running in chats taken over" in node_b.log()
    assert node_b.stop() == 0


def test_an_approval_asked_by_a_killed_daemon_is_decided_on_the_other(
        two_nodes: tuple[Daemon, Daemon], fake_llm: FakeOpenAIThread) -> None:
    node_a, node_b = two_nodes
    node_a.start()
    fake_llm.script_tool_call("write_file", {"path": "notes/plan.txt", "content": "step 1"})
    fake_llm.script_reply("Saved your plan.")
    asked = node_a.say("write my plan to notes/plan.txt")
    prompt = wait_for(lambda: next((t for t in replies_to(node_a, asked)
                                    if t.startswith("Approval needed")), None),
                      what="the approval request on A")
    node_a.kill()
    node_b.start()
    decided = node_b.say("approve")
    assert node_b.wait_reply(decided, timeout=30)["content"] == "Saved your plan."
    assert (node_b.workspace / "notes" / "plan.txt").read_text() == "step 1"
    assert not (node_a.workspace / "notes" / "plan.txt").exists()
    assert "ap_" in prompt
    requests = fake_llm.requests
    assert requests[-1].json["messages"][-1]["role"] == "tool"
    assert node_b.stop() == 0


def test_a_run_is_decided_on_the_daemon_that_holds_its_chat(
        two_nodes: tuple[Daemon, Daemon], fake_llm: FakeOpenAIThread) -> None:
    """Both daemons list the approval (the runs are shared); only the one holding the chat
    acts on it, the other's dashboard says where to go instead of pretending."""
    node_a, node_b = two_nodes
    node_a.start()
    node_b.start()
    chat = chat_held_by(node_a, node_b)
    fake_llm.script_tool_call("write_file", {"path": "notes/a.txt", "content": "from A"})
    fake_llm.script_reply("Done.")
    node_a.say("write notes/a.txt", chat_id=chat)
    approval = wait_for(lambda: next((a for a in node_b.state()["approvals"]
                                      if a["chat_id"] == chat), None),
                        what="the approval, listed by B too")
    body = {"run_id": approval["run_id"], "approval_id": approval["approval_id"],
            "decision": "approve"}
    refused = node_b.api("POST", "/api/approvals/decide", json=body)
    assert refused.status_code == 409 and "another node holds" in refused.text
    assert node_a.api("POST", "/api/approvals/decide", json=body).status_code == 200
    wait_for(lambda: "Done." in [m["content"] for m in node_a.replies(chat)],
             what="the run's answer on A")
    assert (node_a.workspace / "notes" / "a.txt").read_text() == "from A"
    assert node_a.stop() == 0 and node_b.stop() == 0


def test_the_conversation_goes_on_where_the_chat_goes(
        two_nodes: tuple[Daemon, Daemon], fake_llm: FakeOpenAIThread) -> None:
    """The history the model sees comes from the session in Redis: what was said to A is in
    B's prompt after A died."""
    node_a, node_b = two_nodes
    node_a.start()
    first = node_a.say("my name is Ada")
    assert node_a.wait_reply(first)["content"] == "echo: my name is Ada"
    node_a.kill()
    node_b.start()
    second = node_b.say("what is my name?")
    assert node_b.wait_reply(second, timeout=30)["content"] == "echo: what is my name?"
    said = [(m["role"], m["content"]) for m in fake_llm.requests[-1].json["messages"]
            if m["role"] != "system"]
    assert said[-3:] == [("user", "my name is Ada"), ("assistant", "echo: my name is Ada"),
                         ("user", "what is my name?")]
    for node in (node_a, node_b):  # nothing of it in either workspace
        for kept in ("sessions", "threads"):
            directory = node.workspace / "runtime" / kept
            assert not directory.exists() or not any(directory.iterdir()), directory
    assert node_b.stop() == 0
