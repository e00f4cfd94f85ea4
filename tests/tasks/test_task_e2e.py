"""`soulflow run` as a subprocess against the fake model server: tasks from the chat to the end.

`/task` → the planner → the steps run (agent steps on the agent loop with only their tools, tool
steps through the ToolRegistry) → progress and the result in the chat; a risky plan is shown
first; SIGKILL at a step boundary and mid-step, restart, each step's side effect happens once;
an approval given after the restart continues the task; `/stop` cancels a running group.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from soulflow.backends.file.tasks import FileTaskStore
from soulflow.tasks import TaskStatus
from tests.e2e.harness import Daemon, base_env, wait_for
from tests.fakes.openai_api import FakeOpenAIThread


@pytest.fixture
def fake() -> Iterator[FakeOpenAIThread]:
    with FakeOpenAIThread() as server:
        yield server


@pytest.fixture
def daemon(tmp_path: Path, fake: FakeOpenAIThread) -> Iterator[Daemon]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = base_env(workspace, PROVIDER="phi4_local", PHI4_BASE_URL=fake.base_url,
                   PHI4_MODEL="fake-model", TASK_PROGRESS_INTERVAL_S="0",
                   MEMORY_CONSOLIDATION_THRESHOLD="0", HEARTBEAT_INTERVAL="0")
    process = Daemon(workspace, env, tmp_path / "daemon.log")
    yield process
    process.close()


def plan(title: str, *nodes: dict[str, Any]) -> str:
    return json.dumps({"title": title, "nodes": list(nodes)})


def texts(daemon: Daemon) -> list[str]:
    return [m["content"] for m in daemon.replies()]


def wait_text(daemon: Daemon, needle: str, timeout: float = 20.0) -> str:
    def find() -> str | None:
        return next((t for t in texts(daemon) if needle in t), None)
    return wait_for(find, timeout, what=f"a chat message containing {needle!r}:\n"
                    + "\n---\n".join(texts(daemon)))


def start_approved(daemon: Daemon, request: str, approval: str = "approve") -> None:
    """Start the daemon, ask for `/task <request>` and approve the plan it shows."""
    daemon.start()
    daemon.wait_reply(daemon.say(f"/task {request}"))
    daemon.wait_reply(daemon.say(approval))


def store(daemon: Daemon) -> FileTaskStore:
    return FileTaskStore(daemon.workspace / "runtime" / "tasks")


def only_task(daemon: Daemon) -> Any:
    [task] = store(daemon).list()
    return task


def assigns(daemon: Daemon, node_id: str) -> int:
    """How many times a step was started (its `assign` workflow events)."""
    path = daemon.workspace / "runtime" / "events" / "events.jsonl"
    return sum(1 for line in path.read_text().splitlines()
               if (e := json.loads(line))["phase"] == "assign" and e["agent_id"] == node_id)


def test_task_command_plans_runs_and_answers(daemon: Daemon, fake: FakeOpenAIThread) -> None:
    (daemon.workspace / "scratch").mkdir()
    (daemon.workspace / "scratch" / "notes.txt").write_text("alpha beta")
    fake.script_reply(plan(
        "Summarise the notes",
        {"id": "read", "kind": "tool", "tool": "read_file",
         "params": {"path": "scratch/notes.txt"}},
        {"id": "sum", "kind": "agent", "goal": "Summarise the notes", "tools": ["read_file"],
         "inputs": {"notes": {"from": "read"}}}))
    fake.script_reply("Summary: alpha and beta.")
    daemon.start()
    started = daemon.wait_reply(daemon.say("/task summarise scratch/notes.txt"))["content"]
    assert started.startswith("Started task t-") and "(2 steps)" in started
    final = wait_text(daemon, "is done.")
    assert final.endswith("Summary: alpha and beta.")
    task = only_task(daemon)
    assert task.status is TaskStatus.COMPLETED and task.requested_by
    # the agent step saw only its own tools (plus the loop's question/answer intents), its
    # goal and the tool step's output injected as input
    step = fake.requests[1].json
    offered = {t["function"]["name"] for t in step["tools"]}
    assert offered == {"read_file", "request_more_information", "done_for_now"}
    asked = step["messages"][-1]["content"]
    assert "Your goal: Summarise the notes" in asked and "alpha beta" in asked
    assert daemon.stop(signal.SIGTERM) == 0


def test_kill_at_a_boundary_and_mid_step_then_approve_after_restart(
        daemon: Daemon, fake: FakeOpenAIThread) -> None:
    fake.script_reply(plan(
        "Write and report",
        {"id": "write", "kind": "tool", "tool": "write_file",
         "params": {"path": "chats/local-test/out.txt", "content": "written once"}},
        {"id": "gate", "kind": "approval", "prompt": "Report it?", "depends_on": ["write"]},
        {"id": "report", "kind": "agent", "goal": "Report what was written",
         "tools": ["read_file"], "depends_on": ["gate"]}))
    daemon.start()
    shown = daemon.wait_reply(daemon.say("/task write a file and report"))["content"]
    assert shown.startswith("Plan: Write and report") and "Reply approve" in shown
    assert store(daemon).list() == []  # nothing runs before the OK
    daemon.wait_reply(daemon.say("approve"))
    wait_text(daemon, "waits for approval at step gate: Report it?")
    out = daemon.workspace / "chats" / "local-test" / "out.txt"  # the chat's own folder
    assert out.read_text() == "written once"

    daemon.kill()  # at a step boundary: write done, the gate waiting
    daemon.start()
    wait_for(lambda: only_task(daemon).status is TaskStatus.WAITING_APPROVAL,
             what="the task waiting again after the restart")
    fake.script_delay(60)  # the report step's model call hangs: we kill it mid-step
    fake.script_reply("never sent")
    requests = len(fake.requests)
    daemon.wait_reply(daemon.say("ok"))  # the approval after the restart
    fake.wait_for_requests(requests + 1, timeout=20)
    wait_for(lambda: only_task(daemon).nodes["report"].status.value == "running",
             what="the report step running")
    daemon.kill()  # mid-step

    fake.reset()
    fake.script_reply("It says: written once.")
    daemon.start()
    final = wait_text(daemon, "is done.")
    assert final.endswith("It says: written once.")
    task = only_task(daemon)
    assert task.status is TaskStatus.COMPLETED
    assert task.nodes["gate"].decided_by and task.nodes["write"].attempts == 1
    assert assigns(daemon, "write") == 1  # the side effect happened once
    assert out.read_text() == "written once"
    assert daemon.stop(signal.SIGTERM) == 0


def test_stop_cancels_a_running_group(
        daemon: Daemon, fake: FakeOpenAIThread) -> None:
    fake.script_reply(plan(
        "Two slow looks then a note",
        {"id": "a", "kind": "agent", "goal": "Look at A", "tools": ["read_file"]},
        {"id": "b", "kind": "agent", "goal": "Look at B", "tools": ["read_file"]},
        {"id": "note", "kind": "tool", "tool": "write_file", "depends_on": ["a", "b"],
         "params": {"path": "notes/n.txt", "content": "n"}}))
    for _ in range(2):
        fake.script_delay(60)
        fake.script_reply("slow")
    start_approved(daemon, "look at A and B, then note it", approval="yes")
    fake.wait_for_requests(3, timeout=20)  # the plan, then both steps at once
    stopped = daemon.wait_reply(daemon.say("/stop"))["content"]
    assert stopped == "Stopped 1 running task(s)."
    wait_text(daemon, "was cancelled")
    task = only_task(daemon)
    assert task.status is TaskStatus.CANCELLED
    assert {task.nodes[n].status.value for n in ("a", "b", "note")} == {"cancelled"}
    assert not (daemon.workspace / "notes" / "n.txt").exists()
    assert daemon.stop(signal.SIGTERM) == 0


def test_a_tool_step_needing_approval_waits_for_the_requester(
        daemon: Daemon, fake: FakeOpenAIThread) -> None:
    fake.script_reply(plan(
        "Keep a note", {"id": "note", "kind": "tool", "tool": "write_file",
                        "params": {"path": "notes/n.txt", "content": "kept"}}))
    start_approved(daemon, "keep a note")
    prompt = wait_text(daemon, "waits for approval at step note")
    assert "write_file" in prompt and "notes/n.txt" in prompt
    note = daemon.workspace / "notes" / "n.txt"
    assert not note.exists()
    assert only_task(daemon).nodes["note"].status.value == "waiting_approval"
    decided = daemon.wait_reply(daemon.say("approve"))["content"]
    assert decided.endswith("step note approved.")
    wait_text(daemon, "is done.")
    assert note.read_text() == "kept"
    assert daemon.stop(signal.SIGTERM) == 0


def test_a_step_that_is_not_idempotent_waits_after_a_kill_and_retry_finishes_it(
        daemon: Daemon, fake: FakeOpenAIThread) -> None:
    fake.script_reply(plan(
        "Draft", {"id": "draft", "kind": "agent", "goal": "Draft a note",
                  "tools": ["write_file"]}))
    fake.script_delay(60)
    fake.script_reply("never sent")
    start_approved(daemon, "draft a note")  # write_file is not idempotent
    fake.wait_for_requests(2, timeout=20)
    daemon.kill()  # mid-step

    fake.reset()
    fake.script_reply("Drafted.")
    daemon.start()
    prompt = wait_text(daemon, "was interrupted by a restart")
    assert "Reply retry" in prompt
    assert fake.requests == []  # nothing re-ran behind the user's back
    assert daemon.wait_reply(daemon.say("retry"))["content"].endswith("step draft retrying.")
    assert wait_text(daemon, "is done.").endswith("Drafted.")
    assert daemon.stop(signal.SIGTERM) == 0


def test_the_model_starts_a_task_with_the_task_tool(daemon: Daemon,
                                                    fake: FakeOpenAIThread) -> None:
    (daemon.workspace / "scratch").mkdir()
    (daemon.workspace / "scratch" / "list.txt").write_text("one, two")
    fake.script_tool_call("task", {"request": "read scratch/list.txt"})
    fake.script_reply(plan("Read the list", {"id": "read", "kind": "tool", "tool": "read_file",
                                             "params": {"path": "scratch/list.txt"}}))
    fake.script_reply("I started a task for that.")
    daemon.start()
    answer = daemon.wait_reply(daemon.say("please read my list, step by step"))["content"]
    assert answer == "I started a task for that."
    assert wait_text(daemon, "Started task t-").endswith("/task cancel "
                                                           f"{only_task(daemon).task_id} to "
                                                           "stop it.")
    assert wait_text(daemon, "is done.").endswith("one, two")
    task = only_task(daemon)
    assert task.requested_by and task.chat_id == "test"
    planner_request = fake.requests[1].json
    offered = planner_request["messages"][0]["content"].split("Available tools:")[1]
    assert "\n- read_file:" in offered and "\n- task:" not in offered  # no tasks in tasks
    assert "\n- spawn:" not in offered  # a sub-agent would escape a step's allow-list
    assert daemon.stop(signal.SIGTERM) == 0


def test_a_call_needing_approval_inside_an_agent_step_survives_a_restart(
        daemon: Daemon, fake: FakeOpenAIThread) -> None:
    fake.script_reply(plan(
        "Save a note", {"id": "save", "kind": "agent", "goal": "Save the note",
                        "tools": ["write_file"]}))
    fake.script_tool_call("write_file", {"path": "notes/saved.txt", "content": "kept"})
    start_approved(daemon, "save a note")
    prompt = wait_text(daemon, "waits for approval at step save")
    assert "`write_file`" in prompt and "notes/saved.txt" in prompt
    wait_for(lambda: only_task(daemon).status is TaskStatus.WAITING_APPROVAL,
             what="the task waiting")
    daemon.kill()

    fake.reset()
    fake.script_reply("Saved the note.")
    daemon.start()
    saved = daemon.workspace / "notes" / "saved.txt"
    assert not saved.exists()
    assert daemon.wait_reply(daemon.say("approve"))["content"].endswith("step save approved.")
    assert wait_text(daemon, "is done.").endswith("Saved the note.")
    assert saved.read_text() == "kept"
    # the same run went on: the model saw the approved call's result, not a fresh request
    last = fake.requests[-1].json["messages"]
    assert last[-1]["role"] == "tool" and "notes/saved.txt" in last[-1]["content"]
    assert daemon.stop(signal.SIGTERM) == 0
