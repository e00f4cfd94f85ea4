"""End-to-end through the local channel, with `soulflow run` as a subprocess."""

from __future__ import annotations

import signal

from tests.e2e.harness import wait_for
from tests.fakes.openai_api import FakeOpenAIThread


def test_a_message_is_answered_and_recorded(make_daemon, fake_llm: FakeOpenAIThread) -> None:
    daemon = make_daemon().start()
    message_id = daemon.say("hello there")
    reply = daemon.wait_reply(message_id)
    assert reply["content"] == "echo: hello there"
    request = fake_llm.requests[-1].json
    assert request["model"] == "fake-model"
    assert request["messages"][0]["role"] == "system"  # templates reached the model
    assert request["messages"][-1] == {"role": "user", "content": "hello there"}
    state = daemon.state()
    assert state["counters"]["answered"] == 1 and state["queues"]["outbox_pending"] == 0
    assert any(s["key"] == "local:test" for s in state["sessions"])
    # the second turn carries the first as history
    second = daemon.say("again")
    daemon.wait_reply(second)
    history = fake_llm.requests[-1].json["messages"]
    assert [m["content"] for m in history[1:]] == ["hello there", "echo: hello there", "again"]
    assert daemon.stop(signal.SIGTERM) == 0
    assert "SoulFlow stopped" in daemon.log()


def test_soulflow_chat_scripted_over_a_pipe(make_daemon) -> None:
    daemon = make_daemon().start()
    result = daemon.cli("chat", input=b"first line\n\nbad \xff\xfe bytes\n")
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.decode().splitlines()
    assert lines == ["echo: first line",
                     "I received an empty message; write something and I'll answer.",
                     "echo: bad \ufffd\ufffd bytes"]
    status = daemon.cli("status")
    assert status.returncode == 0 and b"received=3" in status.stdout
    assert daemon.alive()


def test_soulflow_chat_without_a_daemon_runs_one_in_process(make_daemon) -> None:
    daemon = make_daemon()
    result = daemon.cli("chat", "--chat-id", "solo", input=b"hi\n")
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().strip() == "echo: hi"
    daemon.start()  # the embedded run released the workspace lock
    assert [m["content"] for m in daemon.transcript("solo")] == ["hi", "echo: hi"]


def test_provider_500s_then_success_still_answers(make_daemon, fake_llm) -> None:
    daemon = make_daemon().start()
    fake_llm.fail_next(2, status=500)
    message_id = daemon.say("are you there?")
    assert daemon.wait_reply(message_id)["content"] == "echo: are you there?"
    assert len(fake_llm.requests) == 3


def test_provider_down_gives_a_clear_reply_and_records_the_failure(make_daemon, fake_llm) -> None:
    daemon = make_daemon(PROVIDER_MAX_RETRIES="1").start()
    fake_llm.fail_next(2, status=503)
    reply = daemon.wait_reply(daemon.say("hello?"))
    assert "couldn't get an answer from the model (server)" in reply["content"]
    assert daemon.state()["counters"]["failed"] == 1
    follow_up = daemon.say("now?")
    assert daemon.wait_reply(follow_up)["content"] == "echo: now?"


def test_no_provider_configured_answers_how_to_configure(make_daemon) -> None:
    daemon = make_daemon(PROVIDER="", PHI4_BASE_URL="").start()
    reply = daemon.wait_reply(daemon.say("hi"))
    assert "No model provider is configured" in reply["content"]
    assert "OPENROUTER_API_KEY" in reply["content"]


def test_bad_input_leaves_the_daemon_up(make_daemon, fake_llm) -> None:
    daemon = make_daemon(MAX_INBOUND_CHARS="200000").start()
    empty = daemon.say("")
    assert "empty message" in daemon.wait_reply(empty)["content"]
    huge = daemon.say("x" * 1_000_000)
    reply = daemon.wait_reply(huge, timeout=30)
    assert reply["content"].startswith("(Your message had 1,000,000 characters; I read the first "
                                       "200,000.)")
    assert len(fake_llm.requests[-1].json["messages"][-1]["content"]) == 200_000
    raw = daemon.api("POST", "/api/chat", content=b'{"text": "\xff\xfe"}',
                     headers={"Content-Type": "application/json"})
    assert raw.status_code == 400 and "not valid UTF-8" in raw.json()["error"]
    not_json = daemon.api("POST", "/api/chat", content=b"{nope",
                          headers={"Content-Type": "application/json"})
    assert not_json.status_code == 400 and "not valid JSON" in not_json.json()["error"]
    untyped = daemon.api("POST", "/api/chat", content=b'{"text": "x"}')  # JSON, not labelled
    assert untyped.status_code == 415 and "application/json" in untyped.json()["error"]
    wrong_type = daemon.api("POST", "/api/chat", json={"text": 42})
    assert wrong_type.status_code == 400
    bad_chat = daemon.api("POST", "/api/chat", json={"text": "x", "chat_id": "../../etc"})
    assert bad_chat.status_code == 400 and "chat id" in bad_chat.json()["error"]
    assert daemon.wait_reply(daemon.say("still alive?"))["content"] == "echo: still alive?"


def test_sigkill_with_50_replies_pending_delivers_each_exactly_once(make_daemon, fake_llm) -> None:
    # 200 ms between two messages to one chat keeps replies waiting in the outbox
    daemon = make_daemon(LOCAL_SEND_INTERVAL_MS="200").start()
    ids = [daemon.say(f"message {i}", chat_id="burst") for i in range(50)]
    wait_for(lambda: daemon.state()["counters"]["answered"] == 50, what="50 answers")
    before = daemon.state()
    assert before["queues"]["outbox_pending"] >= 30, before["queues"]
    daemon.kill()
    daemon.start()
    wait_for(lambda: len(daemon.replies("burst")) >= 50, timeout=30, what="50 replies")
    wait_for(lambda: daemon.state()["queues"]["outbox_pending"] == 0, what="empty outbox")
    replies = daemon.replies("burst")
    assert sorted(r["reply_to"] for r in replies) == sorted(ids)  # each once, none missing
    assert [r["content"] for r in replies] == [f"echo: message {i}" for i in range(50)]
    answers = [r for r in fake_llm.requests if r.json.get("tools")]  # not memory consolidation
    assert len(answers) == 50  # nothing was answered twice by the model


def test_sigkill_with_inbound_work_pending_answers_it_after_restart(make_daemon, fake_llm) -> None:
    daemon = make_daemon().start()
    fake_llm.delay_s = 30  # the model hangs: messages are journaled but not answered
    ids = [daemon.say(f"q{i}", chat_id=f"c{i}") for i in range(3)]
    fake_llm.wait_for_requests(3)
    daemon.kill()
    fake_llm.delay_s = 0
    daemon.start()
    for i, message_id in enumerate(ids):
        assert daemon.wait_reply(message_id, chat_id=f"c{i}")["content"] == f"echo: q{i}"
    for i in range(3):
        assert len(daemon.replies(f"c{i}")) == 1


def test_permanent_send_failure_goes_to_dlq_and_replay_delivers(make_daemon) -> None:
    daemon = make_daemon()
    blocker = daemon.workspace / "runtime" / "local" / "broken.jsonl"
    blocker.mkdir(parents=True)  # the transcript cannot be written: delivery fails for good
    daemon.start()
    daemon.say("please answer", chat_id="broken")
    wait_for(lambda: daemon.state()["queues"]["dlq"] == 1, what="a dead letter")
    listed = daemon.cli("dlq", "list", "--json")
    assert listed.returncode == 0
    assert b"echo: please answer" in listed.stdout and b"Is a directory" in listed.stdout
    blocker.rmdir()  # the operator fixes the cause...
    replay = daemon.cli("dlq", "replay")
    assert replay.returncode == 0 and b"Replayed 1" in replay.stdout
    wait_for(lambda: any(m["content"] == "echo: please answer"
                         for m in daemon.transcript("broken")), what="the replayed reply")
    assert daemon.state()["queues"]["dlq"] == 0


def test_dlq_commands_work_without_a_daemon(make_daemon) -> None:
    daemon = make_daemon()
    blocker = daemon.workspace / "runtime" / "local" / "gone.jsonl"
    blocker.mkdir(parents=True)
    daemon.start()
    daemon.say("x", chat_id="gone")
    wait_for(lambda: daemon.state()["queues"]["dlq"] == 1, what="a dead letter")
    daemon.stop()
    listed = daemon.cli("dlq", "list")
    assert listed.returncode == 0 and b"local:gone" in listed.stdout
    blocker.rmdir()
    replay = daemon.cli("dlq", "replay")
    assert b"sent when the daemon starts" in replay.stdout
    daemon.start()
    wait_for(lambda: len(daemon.replies("gone")) == 1, what="delivery after restart")
    assert daemon.cli("dlq", "purge").stdout.startswith(b"Purged 0")
