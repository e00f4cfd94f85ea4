"""`/task list | show | cancel` answered from the task store, with the approval rule for
cancel."""

from __future__ import annotations

from pathlib import Path

from soulflow.backends.file.tasks import FileTaskStore
from soulflow.backends.file.workflow import FileWorkflowLog
from soulflow.channels.base import Command
from soulflow.contracts import InboundMessage
from soulflow.events.workflow import WorkflowEventService
from soulflow.tasks import NodeKind, TaskEngine, TaskGraph, TaskNode, TaskStatus
from soulflow.tasks.answers import require
from soulflow.tasks.commands import idle_canceller, make_task_command
from tests.tasks.helpers import Toolbox, echo


def message(sender: str = "u1", chat: str = "C1") -> InboundMessage:
    return InboundMessage(provider="slack", chat_id=chat, message_id="m1", sender_id=sender,
                          text="/task")


def gated() -> TaskGraph:
    return TaskGraph([TaskNode(id="draft", kind=NodeKind.TOOL, tool="echo",
                               params={"text": "hi"}),
                      TaskNode(id="ok", kind=NodeKind.APPROVAL, prompt="Send it?",
                               depends_on=["draft"]),
                      TaskNode(id="send", kind=NodeKind.TOOL, tool="echo", depends_on=["ok"])])


async def test_list_show_and_cancel(tmp_path: Path) -> None:
    store = FileTaskStore(tmp_path / "runtime" / "tasks")
    events = WorkflowEventService(FileWorkflowLog(tmp_path / "runtime" / "events"),
                                  workspace=tmp_path)
    events.bind_task_store(store)
    engine = TaskEngine(store, Toolbox({"echo": echo}).executors(),
                        emit=events.emit_task_event)
    handle = make_task_command(store, engine.cancel,
                               lambda provider, user: user == "boss")
    assert await handle(Command("task", ""), message()) == "No tasks in this chat."

    task = await engine.submit(gated(), title="Mail the vendors", provider="slack",
                               chat_id="C1", requested_by="u1", task_id="t-mail")
    await engine.wait("t-mail")
    await engine.submit(gated(), title="Elsewhere", provider="slack", chat_id="C2",
                        requested_by="u9", task_id="t-other")
    await engine.wait("t-other")

    listed = await handle(Command("task", "list"), message())
    assert listed == ("Tasks in this chat:\n"
                      "• t-mail waiting_approval: Mail the vendors (1/3 steps done)")
    shown = await handle(Command("task", "show t-mail"), message())
    assert shown.startswith("Task t-mail: Mail the vendors\nStatus: waiting_approval")
    assert "• ok (approval) waiting_approval - Send it?" in shown
    assert "Waiting on ok (approval): Send it?" in shown
    assert "Recent:" in shown and "**blocked** ok: waiting for approval" in shown

    # another chat's task is invisible; an admin may name it
    assert await handle(Command("task", "show t-other"), message()) == \
        "There is no task t-other in this chat."
    assert (await handle(Command("task", "show t-other"), message("boss"))).startswith(
        "Task t-other")

    assert await handle(Command("task", "cancel t-mail"), message("u2")) == \
        "Only the person who asked for task t-mail or an admin can cancel it."
    assert await handle(Command("task", "cancel t-mail"), message("u1")) == \
        "Task t-mail is cancelled."
    assert task.status is TaskStatus.CANCELLED and task.error == "cancelled by u1"
    assert await handle(Command("task", "cancel t-mail"), message("u1")) == \
        "Could not cancel: task t-mail is already cancelled."
    assert await handle(Command("task", "cancel t-other"), message("boss", "C1")) == \
        "Task t-other is cancelled."
    assert await handle(Command("task", "frobnicate"), message()) == \
        "Usage: /task list | /task show ID | /task cancel ID"
    assert require(FileTaskStore(store.directory), "t-mail").status is TaskStatus.CANCELLED
    await engine.stop()


async def test_idle_canceller_without_an_engine(tmp_path: Path) -> None:
    """The daemon's wiring today: a waiting task from an earlier run is cancelled from chat."""
    store = FileTaskStore(tmp_path / "runtime" / "tasks")
    engine = TaskEngine(store, Toolbox({"echo": echo}).executors())
    await engine.submit(gated(), title="Old", provider="slack", chat_id="C1",
                        requested_by="u1", task_id="t-old")
    await engine.wait("t-old")
    await engine.stop()

    reloaded = FileTaskStore(store.directory)
    events = WorkflowEventService(FileWorkflowLog(tmp_path / "runtime" / "events"),
                                  workspace=tmp_path)
    events.bind_task_store(reloaded)
    handle = make_task_command(reloaded, idle_canceller(reloaded, events.emit_task_event),
                               lambda provider, user: False)
    assert await handle(Command("task", "cancel t-old"), message("u1")) == \
        "Task t-old is cancelled."
    assert await handle(Command("task", "cancel t-old"), message("u1")) == \
        "Could not cancel: task t-old is already cancelled."
    task = require(FileTaskStore(store.directory), "t-old")
    assert task.status is TaskStatus.CANCELLED
    assert task.nodes["ok"].status.value == "cancelled"
    assert events.recent(1)[0]["summary"] == "task cancelled by u1"
