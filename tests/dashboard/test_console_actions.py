"""The console's actions against a real daemon: each answers with the new state, is logged
with who did it, announced as a live event, and does what the button says."""

from __future__ import annotations

import asyncio
from typing import Any

from soulflow.backends.file.tasks import FileTaskStore
from tests.e2e.harness import Daemon, wait_for
from tests.tasks.helpers import waiting_task


def texts(daemon: Daemon, chat_id: str) -> list[str]:
    return [m["content"] for m in daemon.replies(chat_id)]


def post(daemon: Daemon, path: str, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    """As the page posts: asking for the new state in the answer."""
    response = daemon.api("POST", path, json=body, headers={"X-SoulFlow-State": "1"})
    assert response.status_code == status, response.text
    return response.json()


def pending_approval(daemon: Daemon, fake_llm: Any, chat_id: str, path: str) -> dict[str, Any]:
    fake_llm.script_tool_call("write_file", {"path": path, "content": "from the console"})
    fake_llm.script_reply("Done.")
    daemon.say(f"write {path}", chat_id=chat_id)
    return wait_for(lambda: next((a for a in daemon.state()["approvals"]
                                  if a["chat_id"] == chat_id), None), what="the approval")


def test_approve_and_deny_from_the_console(make_daemon, fake_llm) -> None:
    daemon = make_daemon().start()
    approval = pending_approval(daemon, fake_llm, "ok-chat", "notes/a.txt")
    assert approval["tool"] == "write_file" and "notes/a.txt" in approval["arguments"]
    assert approval["requester"] and approval["since"] > 0
    assert approval["admins_only"] is True  # the operator's files: the console is the operator
    assert any(r["run_id"] == approval["run_id"] and r["status"] == "waiting_approval"
               for r in daemon.state()["runs"])
    answer = post(daemon, "/api/approvals/decide", {
        "run_id": approval["run_id"], "approval_id": approval["approval_id"],
        "decision": "approve"})
    assert answer["ok"] and answer["decision"] == "approve"
    assert all(a["run_id"] != approval["run_id"] for a in answer["state"]["approvals"])
    wait_for(lambda: "Done." in texts(daemon, "ok-chat"), what="the run's answer")
    assert (daemon.workspace / "notes" / "a.txt").read_text() == "from the console"
    # deciding again: nothing is pending any more
    post(daemon, "/api/approvals/decide", {"run_id": approval["run_id"],
                                           "decision": "approve"}, status=409)

    denied = pending_approval(daemon, fake_llm, "no-chat", "notes/b.txt")
    post(daemon, "/api/approvals/decide", {"run_id": denied["run_id"], "decision": "deny"})
    wait_for(lambda: "Done." in texts(daemon, "no-chat"), what="the answer after the denial")
    assert not (daemon.workspace / "notes" / "b.txt").exists()
    assert "denied" in fake_llm.requests[-1].json["messages"][-1]["content"]
    # logged with who (a token is set: its holder) and from where
    assert f"dashboard action approve {approval['approval_id']} by the token holder from " \
           "127.0.0.1" in daemon.log()
    post(daemon, "/api/approvals/decide", {"run_id": "r", "decision": "maybe"}, status=400)


def test_cancel_a_waiting_run_and_unknown_ones(make_daemon, fake_llm) -> None:
    daemon = make_daemon().start()
    approval = pending_approval(daemon, fake_llm, "cx", "notes/c.txt")
    answer = post(daemon, "/api/runs/cancel", {"run_id": approval["run_id"]})
    assert answer["outcome"] == "cancelled"
    assert all(r["run_id"] != approval["run_id"] for r in answer["state"]["runs"])
    wait_for(lambda: any(t.startswith("Cancelled") for t in texts(daemon, "cx")),
             what="the chat told of the cancel")
    post(daemon, "/api/runs/cancel", {"run_id": approval["run_id"]}, status=409)
    post(daemon, "/api/runs/cancel", {"run_id": "r_does_not_exist"}, status=404)
    post(daemon, "/api/runs/cancel", {}, status=400)
    post(daemon, "/api/tasks/cancel", {"task_id": "t_does_not_exist"}, status=404)
    post(daemon, "/api/tasks/cancel", {"task_id": 7}, status=400)


def test_cancel_a_running_run_stops_it(make_daemon, fake_llm) -> None:
    daemon = make_daemon().start()
    fake_llm.script_delay(600)  # the model takes its time: the run is mid-call
    daemon.say("think hard", chat_id="slow")
    run = wait_for(lambda: next((r for r in daemon.state()["runs"]
                                 if r["chat_id"] == "slow" and r["status"] == "running"), None),
                   what="the running run")
    assert run["step"].startswith("thinking")
    assert post(daemon, "/api/runs/cancel", {"run_id": run["run_id"]})["outcome"] == "stopping"
    fake_llm.wait_hung_up(0, timeout=30)  # the model call itself was cancelled
    wait_for(lambda: "Stopped." in texts(daemon, "slow"), timeout=30, what="the stopped run")
    assert all(r["run_id"] != run["run_id"] for r in daemon.state()["runs"])


def test_dlq_entries_replayed_and_purged_one_by_one(make_daemon) -> None:
    daemon = make_daemon()
    for chat in ("dead1", "dead2"):
        (daemon.workspace / "runtime" / "local" / f"{chat}.jsonl").mkdir(parents=True)
    daemon.start()
    daemon.say("one", chat_id="dead1")
    daemon.say("two", chat_id="dead2")
    letters = wait_for(lambda: len(daemon.state()["dlq"]["outbound"]) == 2
                       and daemon.state()["dlq"]["outbound"], what="two dead letters")
    by_chat = {e["chat_id"]: e for e in letters}
    assert by_chat["dead1"]["content"] == "echo: one" and "Is a directory" in \
        by_chat["dead1"]["error"]
    answer = post(daemon, "/api/dlq/purge", {"ids": [by_chat["dead2"]["message_id"]]})
    assert answer["purged"] == 1 and [e["chat_id"] for e in answer["state"]["dlq"]["outbound"]] \
        == ["dead1"]
    (daemon.workspace / "runtime" / "local" / "dead1.jsonl").rmdir()  # the cause is fixed
    answer = post(daemon, "/api/dlq/replay", {"ids": [by_chat["dead1"]["message_id"]]})
    assert answer["replayed"] == 1 and answer["state"]["dlq"]["outbound"] == []
    wait_for(lambda: "echo: one" in texts(daemon, "dead1"), what="the replayed reply")
    assert post(daemon, "/api/dlq/purge", {"inbound": True})["purged"] == 0
    kinds = [e["kind"] for e in daemon.state()["recent_messages"]]
    assert "agent.reply" in kinds


def test_cron_job_paused_resumed_and_run(make_daemon) -> None:
    daemon = make_daemon().start()
    added = post(daemon, "/api/cron/add", {
        "name": "standup", "text": "time for standup", "chat": "local:crew",
        "schedule": {"kind": "every", "every_s": 3600}})
    job_id = added["job"]["id"]
    listed = added["state"]["cron_jobs"]
    assert [j["id"] for j in listed] == [job_id] and listed[0]["next_run_at"]
    paused = post(daemon, "/api/cron/disable", {"id": job_id})
    assert paused["state"]["cron_jobs"][0]["enabled"] is False
    resumed = post(daemon, "/api/cron/enable", {"id": job_id})
    assert resumed["state"]["cron_jobs"][0]["enabled"] is True
    post(daemon, "/api/cron/run", {"id": job_id})
    wait_for(lambda: "echo: time for standup" in texts(daemon, "crew"), what="the job's turn")
    log = daemon.log()
    assert "dashboard POST /api/cron/disable by the token holder from 127.0.0.1: 200" in log
    # the CLI's answers (no header) stay as they were: no state added
    assert "state" not in daemon.api("POST", "/api/cron/enable", json={"id": job_id}).json()


def test_approve_a_waiting_task_step(make_daemon) -> None:
    daemon = make_daemon()
    store = FileTaskStore(daemon.workspace / "runtime" / "tasks")
    asyncio.run(store.add(waiting_task("t-go", "ops")))
    daemon.start()
    [approval] = daemon.state()["approvals"]
    assert approval["kind"] == "task" and approval["task_id"] == "t-go"
    assert approval["reason"] == "Send the mail?" and approval["requester"] == "someone"
    answer = post(daemon, "/api/approvals/decide", {"task_id": "t-go", "decision": "approve"})
    assert answer["outcome"] == "Task t-go: step ok approved."
    wait_for(lambda: daemon.state()["task_list"][0]["status"] == "completed",
             what="the task finished after the approval")
    assert "Task t-go: step ok approved." in texts(daemon, "ops")
    post(daemon, "/api/approvals/decide", {"task_id": "t-go", "decision": "approve"},
         status=409)
    post(daemon, "/api/approvals/decide", {"task_id": "t-nope", "decision": "deny"},
         status=404)


def test_cancel_a_waiting_task_graph(make_daemon) -> None:
    daemon = make_daemon()
    tasks = FileTaskStore(daemon.workspace / "runtime" / "tasks")
    asyncio.run(tasks.add(waiting_task("t-wait", "ops")))
    daemon.start()
    [shown] = daemon.state()["task_list"]
    assert shown["current"] == ["ok"] and shown["waiting"] == ["Send the mail?"]
    answer = post(daemon, "/api/tasks/cancel", {"task_id": "t-wait"})
    assert answer["status"] == "cancelled"
    [after] = answer["state"]["task_list"]
    assert after["status"] == "cancelled" and after["finished"] is True
    post(daemon, "/api/tasks/cancel", {"task_id": "t-wait"}, status=409)
    wait_for(lambda: any(e["data"].get("task_id") == "t-wait"
                         for e in daemon.state()["workflow_events"]), what="the workflow event")
