"""`soulflow run` as a subprocess: /task answers from the task store a previous run left behind,
and cancelling writes a workflow event and the task's detail log."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from soulflow.backends.file.tasks import FileTaskStore
from soulflow.tasks import NodeKind, TaskNode, TaskStatus
from soulflow.tasks.answers import require
from tests.e2e.harness import Daemon, base_env
from tests.fakes.openai_api import FakeOpenAIThread
from tests.tasks.helpers import waiting_task


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with FakeOpenAIThread() as fake:
        env = base_env(workspace, PROVIDER="phi4_local", PHI4_BASE_URL=fake.base_url,
                       PHI4_MODEL="fake-model")
        process = Daemon(workspace, env, tmp_path / "daemon.log")
        yield process
        process.close()


def first_workflow_event(daemon: Daemon) -> dict[str, Any]:
    with httpx.stream("GET", daemon.url + "/api/events", headers=daemon.headers,
                      timeout=10) as response:
        for line in response.iter_lines():
            if line.startswith("data: ") and json.loads(line[6:]).get("kind") == "workflow":
                return json.loads(line[6:])
    raise AssertionError("no workflow event on /api/events")


def test_task_command_in_a_running_daemon(daemon: Daemon) -> None:
    tasks_dir = daemon.workspace / "runtime" / "tasks"
    send = TaskNode(id="send", kind=NodeKind.TOOL, tool="message", depends_on=["ok"])
    asyncio.run(FileTaskStore(tasks_dir).add(waiting_task("t-wait", "test", send)))
    daemon.start()
    assert daemon.state()["task_graphs"] == {"unfinished": 1, "problems": [], "running": 0}

    listed = daemon.wait_reply(daemon.say("/task list"))["content"]
    assert listed == ("Tasks in this chat:\n"
                      "• t-wait waiting_approval: Mail the vendors (1/3 steps done)")
    shown = daemon.wait_reply(daemon.say("/task show t-wait"))["content"]
    assert "Waiting on ok (approval): Send the mail?" in shown
    # the local operator is an admin: may cancel a task someone else asked for
    cancelled = daemon.wait_reply(daemon.say("/task cancel t-wait"))["content"]
    assert cancelled == "Task t-wait is cancelled."
    assert daemon.state()["task_graphs"]["unfinished"] == 0
    live = first_workflow_event(daemon)  # the dashboard's SSE stream replays recent events
    assert live["data"]["task_id"] == "t-wait" and live["data"]["phase"] == "done"
    assert daemon.stop(signal.SIGTERM) == 0

    assert require(FileTaskStore(tasks_dir), "t-wait").status is TaskStatus.CANCELLED
    events = daemon.workspace / "runtime" / "events" / "events.jsonl"
    [event] = [json.loads(line) for line in events.read_text().splitlines()]
    assert event["task_id"] == "t-wait" and event["phase"] == "done"
    assert event["payload"]["status"] == "cancelled" and event["chat_id"] == "test"
    assert event["detail_file"] == "runtime/tasks/details/t-wait.md"
    story = (daemon.workspace / event["detail_file"]).read_text()
    assert "**done**: task cancelled by" in story
    assert json.loads((events.parent / "index.json").read_text())["ids"] == [event["event_id"]]


def test_a_corrupt_task_store_is_reported_not_emptied(daemon: Daemon) -> None:
    tasks_dir = daemon.workspace / "runtime" / "tasks"
    tasks_dir.mkdir(parents=True)
    (tasks_dir / "store.json").write_text('{"version": 1, "tasks": {"t-1": ')
    daemon.start()
    [problem] = daemon.state()["task_graphs"]["problems"]
    assert "moved aside to store.json.corrupt-" in problem
    [moved] = list(tasks_dir.glob("store.json.corrupt-*"))
    assert moved.read_text() == '{"version": 1, "tasks": {"t-1": '
    assert "task store: the task store was unreadable" in daemon.log()
