"""End-to-end agent runs through the local channel: tools, approvals, questions, crashes."""

from __future__ import annotations

from tests.e2e.harness import wait_for
from tests.fakes.openai_api import FakeOpenAIThread


def assistant_texts(daemon, chat_id: str = "test") -> list[str]:  # type: ignore[no-untyped-def]
    return [m["content"] for m in daemon.replies(chat_id)]


def test_tool_call_needing_approval_runs_after_approve(make_daemon, fake_llm) -> None:
    daemon = make_daemon().start()
    fake_llm.script_tool_call("write_file", {"path": "notes/plan.txt", "content": "step 1"})
    fake_llm.script_reply("Saved your plan.")
    daemon.say("write my plan to notes/plan.txt")
    request = wait_for(lambda: next((t for t in assistant_texts(daemon)
                                     if t.startswith("Approval needed")), None),
                       what="the approval request")
    assert "write_file" in request and "Only an admin can approve this: it changes the " \
        "operator's files (notes/plan.txt)." in request
    assert not (daemon.workspace / "notes" / "plan.txt").exists()
    daemon.say("approve")  # the local chat is the operator's: an admin
    wait_for(lambda: "Saved your plan." in assistant_texts(daemon), what="the final answer")
    assert (daemon.workspace / "notes" / "plan.txt").read_text() == "step 1"
    tool_result = fake_llm.requests[-1].json["messages"][-1]
    assert tool_result["role"] == "tool" and "notes/plan.txt" in tool_result["content"]


def test_denied_call_and_pending_approval_survives_sigkill(make_daemon, fake_llm) -> None:
    daemon = make_daemon().start()
    fake_llm.script_tool_call("write_file", {"path": "x/y.txt", "content": "no"})
    fake_llm.script_reply("OK, I left it alone.")
    daemon.say("write x/y.txt")
    wait_for(lambda: any(t.startswith("Approval needed") for t in assistant_texts(daemon)),
             what="the approval request")
    daemon.kill()
    daemon.start()
    daemon.say("거부")  # deny, in Korean
    wait_for(lambda: "OK, I left it alone." in assistant_texts(daemon), what="the answer")
    assert not (daemon.workspace / "x" / "y.txt").exists()
    assert "denied" in fake_llm.requests[-1].json["messages"][-1]["content"]
    assert sum(t.startswith("Approval needed") for t in assistant_texts(daemon)) == 1


def test_request_more_information_waits_for_the_answer(make_daemon, fake_llm) -> None:
    daemon = make_daemon().start()
    fake_llm.script_tool_call("request_more_information", {"question": "Which city?"})
    fake_llm.script_reply("Seoul is sunny.")
    daemon.say("what's the weather?")
    wait_for(lambda: "Which city?" in assistant_texts(daemon), what="the question")
    daemon.say("Seoul")
    wait_for(lambda: "Seoul is sunny." in assistant_texts(daemon), what="the answer")
    assert "The user answered: Seoul" in fake_llm.requests[-1].json["messages"][-1]["content"]


def test_sigkill_mid_tool_reports_interrupted_and_does_not_rerun(make_daemon,
                                                                  fake_llm: FakeOpenAIThread
                                                                  ) -> None:
    daemon = make_daemon().start()
    fake_llm.script_tool_call("exec", {"command": "echo run >> \"$HOME/ran.txt\"; sleep 30"})
    fake_llm.script_reply("The command was interrupted; I did not run it again.")
    message_id = daemon.say("run the long job")
    marker = wait_for(lambda: next(daemon.workspace.glob("chats/*/ran.txt"), None),
                      what="the tool to start")  # in the chat's folder, exec's HOME
    daemon.kill()
    daemon.start()
    reply = daemon.wait_reply(message_id, timeout=30)
    assert reply["content"] == "The command was interrupted; I did not run it again."
    assert marker.read_text() == "run\n"  # not run a second time
    assert "interrupted" in fake_llm.requests[-1].json["messages"][-1]["content"]
    assert len(daemon.replies()) == 1


def test_stop_command_cancels_the_model_call_and_no_answer_comes(
        make_daemon, fake_llm: FakeOpenAIThread) -> None:
    """/stop while the model is answering: the model call is cancelled (the fake model sees
    the daemon hang up its request), the chat is told, and the answer never comes. A message
    sent after the stop is answered; since a chat is answered in order, by then anything
    still coming for the stopped one would have come."""
    daemon = make_daemon().start()
    fake_llm.script_delay(600)  # the answer is ten minutes away
    fake_llm.script_reply("the slow answer")
    asked = daemon.say("slow question", chat_id="s")
    fake_llm.wait_for_requests(1, timeout=30)
    daemon.api("POST", "/api/chat", json={"chat_id": "s", "text": "/stop"})
    fake_llm.wait_hung_up(0, timeout=30)  # the call itself was cancelled
    wait_for(lambda: "Stopped." in assistant_texts(daemon, "s"), what="the stop")
    assert any(t.startswith("Stopped 1 running task") for t in assistant_texts(daemon, "s"))
    after = daemon.say("after the stop", chat_id="s")
    assert daemon.wait_reply(after, "s")["content"] == "echo: after the stop"
    texts = assistant_texts(daemon, "s")
    assert "the slow answer" not in texts and "echo: slow question" not in texts
    assert [m["content"] for m in daemon.replies("s") if m.get("reply_to") == asked] == [
        "Stopped."]
    # the model was asked twice: the stopped question once (not again), then the next one
    assert [r.json["messages"][-1]["content"] for r in fake_llm.requests][1:] == [
        "after the stop"]


def test_repl_render_and_cron_commands(make_daemon, fake_llm) -> None:
    daemon = make_daemon().start()
    repl = daemon.wait_reply(daemon.say("/repl sum(range(10))", chat_id="cmd"), "cmd")
    assert repl["content"] == "```\n45\n```"
    escape = daemon.wait_reply(daemon.say("/repl __import__('os')", chat_id="cmd"), "cmd")
    assert "Error" in escape["content"]
    render = daemon.wait_reply(daemon.say("/render graph LR\n  Alpha --> Beta", chat_id="cmd"),
                               "cmd", timeout=30)
    assert "Alpha" in render["content"] and "Beta" in render["content"]
    cron = daemon.wait_reply(daemon.say("/cron list", chat_id="cmd"), "cmd")
    assert cron["content"] == "No scheduled jobs in this chat."
    assert fake_llm.requests == []  # commands never reach the model
