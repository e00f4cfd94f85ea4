"""The chat side of tasks in one process: the plan review (approve, edit by reply, cancel), who
may answer a waiting task (replies and reactions), and rate-limited progress.

Real parts: the TaskEngine and FileTaskStore, DaemonExecutors over a ToolRegistry with the real file
tools, the planner on the OpenAI-compatible provider against the loopback fake model.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from soulflow.agent.approvals import ApproverPolicy, Decider
from soulflow.agent.tools.base import ChatRef, Tool, ToolContext
from soulflow.agent.tools.files import ReadFileTool, WriteFileTool
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.backends.file.proposals import FileProposalMap
from soulflow.backends.file.tasks import FileTaskStore
from soulflow.channels.base import Command
from soulflow.contracts import Announcement, InboundMessage, TaskStepRef, new_id
from soulflow.providers.openai_compat import OpenAICompatibleConfig, OpenAICompatibleProvider
from soulflow.tasks import (
    NodeKind,
    NodeStatus,
    TaskEngine,
    TaskGraph,
    TaskNode,
    TaskState,
    TaskStatus,
)
from soulflow.tasks.answers import require
from soulflow.tasks.chat import TaskChat
from soulflow.tasks.contracts import TaskEvent
from soulflow.tasks.executors import DaemonExecutors
from soulflow.tasks.planner import Planner
from soulflow.tasks.progress import TaskProgress
from tests.fakes.openai_api import FakeOpenAI

ADMIN = "carol"
OWN = "chats/telegram-c1"  # the folder of the chat the tasks run in (telegram:c1)


class LookTool(Tool):
    """Reads only (idempotent), but asks first when it looks outside the workspace."""

    name = "look"
    description = "look at a place"
    parameters = {"type": "object", "properties": {"where": {"type": "string"}}}
    idempotent = True

    def needs_approval(self, params: dict[str, Any], ctx: ToolContext) -> str | None:
        return "it looks outside" if params.get("where") == "outside" else None

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> str:
        return f"saw {params.get('where')}"


class CalcTool(Tool):
    """Runs code and changes nothing (idempotent), like python_repl."""

    name = "calc"
    description = "compute something"
    parameters = {"type": "object", "properties": {"code": {"type": "string"}}}
    idempotent = True
    runs_code = True

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> str:
        return "42"


@dataclass
class Rig:
    chat: TaskChat
    engine: TaskEngine
    store: FileTaskStore
    fake: FakeOpenAI
    workspace: Path

    def message(self, text: str, sender: str = "alice") -> InboundMessage:
        return InboundMessage(provider="telegram", chat_id="c1", message_id=new_id("m"),
                              sender_id=sender, sender_name=sender, text=text)

    async def say(self, text: str, sender: str = "alice") -> str | None:
        message = self.message(text, sender)
        if text.startswith("/task "):
            return await self.chat.command(Command("task", text[6:]), message)
        return await self.chat.reply(message)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    tools = ToolRegistry()
    for tool in (ReadFileTool(), WriteFileTool(), LookTool(), CalcTool()):
        tools.register(tool)

    def context(chat: ChatRef, approved: bool) -> ToolContext:
        return ToolContext(workspace=workspace, approved=approved, chat=chat.where())

    executors = DaemonExecutors(tools, context, None)
    store = FileTaskStore(tmp_path / "tasks")
    engine = TaskEngine(store, executors.executors(), tool_names=executors.tool_names())
    async with FakeOpenAI() as fake:
        provider = OpenAICompatibleProvider(OpenAICompatibleConfig(
            name="fake", base_url=fake.base_url, model="m", max_retries=0))
        chat = TaskChat(engine, executors, lambda: Planner(provider, executors.tool_names()),
                        FileProposalMap(tmp_path / "tasks" / "proposals.json"),
                        ApproverPolicy(lambda provider, user: user == ADMIN))
        yield Rig(chat, engine, store, fake, workspace)
        await engine.stop()
        await chat.stop()
        await provider.close()


WRITE = {"id": "w", "kind": "tool", "tool": "write_file",
         "params": {"path": f"{OWN}/a.txt", "content": "A"}}


async def test_a_risky_plan_is_shown_edited_by_reply_and_started_on_approval(rig: Rig) -> None:
    rig.fake.script_reply(json.dumps({"title": "Write A", "nodes": [WRITE]}))
    shown = await rig.say("/task write A")
    assert shown is not None and shown.startswith("Plan: Write A")
    assert "w calls write_file, which changes things" in shown
    assert rig.store.list() == []
    # someone else's words are not an edit (they go on to the agent), their "ok" is refused
    assert await rig.say("what a nice day", sender="bob") is None
    assert await rig.say("ok", sender="bob") == \
        "Only alice or an admin can decide this approval."
    second = {"id": "w2", "kind": "tool", "tool": "write_file", "depends_on": ["w"],
              "params": {"path": f"{OWN}/b.txt", "content": "B"}}
    rig.fake.script_reply(json.dumps({"title": "Write A and B", "nodes": [WRITE, second]}))
    reshown = await rig.say("also write B")
    assert reshown is not None and reshown.startswith("Plan: Write A and B")
    edit = rig.fake.requests[-1].json["messages"][-1]["content"]
    assert edit.startswith("write A") and f'"{OWN}/a.txt"' in edit
    assert edit.endswith("Change the plan as follows and answer with the whole new plan: "
                         "also write B")
    started = await rig.say("approve")
    assert started is not None and started.startswith("Started task t-")
    [task] = rig.store.list()
    assert task.requested_by == "alice" and task.title == "Write A and B"
    assert (await rig.engine.wait(task.task_id)).status is TaskStatus.COMPLETED
    assert (rig.workspace / OWN / "b.txt").read_text() == "B"
    assert await rig.say("approve") is None  # nothing left to approve


async def test_a_plan_without_risky_steps_starts_at_once_and_cancel_drops_one(rig: Rig) -> None:
    read = {"id": "r", "kind": "tool", "tool": "read_file", "params": {"path": "x.txt"}}
    (rig.workspace / "x.txt").write_text("x")
    rig.fake.script_reply(json.dumps({"title": "Read x", "nodes": [read]}))
    started = await rig.say("/task read x")
    assert started is not None and started.startswith("Started task t-")
    rig.fake.script_reply(json.dumps({"title": "Write A", "nodes": [WRITE]}))
    await rig.say("/task write A")
    assert await rig.say("cancel") == 'OK, I dropped the plan "Write A".'
    assert len(rig.store.list()) == 1


async def gated_task(rig: Rig) -> str:
    graph = TaskGraph([TaskNode(id="gate", kind=NodeKind.APPROVAL, prompt="Go on?"),
                       TaskNode(id="w", kind=NodeKind.TOOL, tool="write_file",
                                params={"path": f"{OWN}/g.txt", "content": "g"},
                                depends_on=["gate"])])
    task = await rig.engine.submit(graph, title="Gated", provider="telegram", chat_id="c1",
                                   requested_by="alice")
    assert (await rig.engine.wait(task.task_id)).status is TaskStatus.WAITING_APPROVAL
    return task.task_id


async def test_another_users_ok_does_not_approve_a_gate(rig: Rig) -> None:
    task_id = await gated_task(rig)
    assert await rig.say("ok", sender="bob") == \
        "Only alice or an admin can decide this approval."
    assert require(rig.store, task_id).status is TaskStatus.WAITING_APPROVAL
    assert not (rig.workspace / OWN / "g.txt").exists()
    answer = await rig.say(f"approve {task_id}", sender=ADMIN)  # an admin may
    assert answer == f"Task {task_id}: step gate approved."
    task = await rig.engine.wait(task_id)
    assert task.status is TaskStatus.COMPLETED and task.nodes["gate"].decided_by == ADMIN
    assert (rig.workspace / OWN / "g.txt").read_text() == "g"


async def test_a_reaction_decides_only_for_the_requester_or_an_admin(rig: Rig) -> None:
    task_id = await gated_task(rig)
    bob = Decider("telegram", "bob")
    assert await rig.chat.decide_reaction(task_id, "gate", "deny", bob) is None
    assert require(rig.store, task_id).status is TaskStatus.WAITING_APPROVAL
    alice = Decider("telegram", "alice")
    answer = await rig.chat.decide_reaction(task_id, "gate", "deny", alice)
    assert answer == f"Task {task_id}: step gate denied."
    assert (await rig.engine.wait(task_id)).status is TaskStatus.CANCELLED


async def test_a_tool_step_needing_approval_waits_and_a_denial_cancels(rig: Rig) -> None:
    graph = TaskGraph([TaskNode(id="w", kind=NodeKind.TOOL, tool="look",
                                params={"where": "outside"})])
    task = await rig.engine.submit(graph, title="Outside", provider="telegram", chat_id="c1",
                                   requested_by="alice")
    waiting = await rig.engine.wait(task.task_id)
    assert waiting.status is TaskStatus.WAITING_APPROVAL
    [entry] = waiting.waiting
    assert entry["reason"] == "approval" and "it looks outside" in entry["prompt"]
    assert await rig.say("no") == f"Task {task.task_id}: step w denied."
    done = await rig.engine.wait(task.task_id)
    assert done.status is TaskStatus.CANCELLED and done.error == "w: denied by alice"


async def test_a_step_changing_the_operators_files_waits_for_an_admin(rig: Rig) -> None:
    """The requester approved the plan, but its write to templates/ is an admins-only call:
    her own "approve" (reply or reaction) is refused and nothing is written; an admin's is
    taken and the write happens."""
    graph = TaskGraph([TaskNode(id="w", kind=NodeKind.TOOL, tool="write_file",
                                params={"path": "templates/rule.md", "content": "obey"})])
    task = await rig.engine.submit(graph, title="Plant", provider="telegram", chat_id="c1",
                                   requested_by="alice")
    waiting = await rig.engine.wait(task.task_id)
    assert waiting.status is TaskStatus.WAITING_APPROVAL
    assert (waiting.nodes["w"].approval or {}).get("admins_only") is True
    refusal = await rig.say(f"approve {task.task_id}")
    assert refusal is not None and refusal.startswith("Only an admin can approve this: ")
    assert "it changes the operator's files (templates/rule.md)" in refusal
    assert await rig.chat.decide_reaction(task.task_id, "w", "approve",
                                          Decider("telegram", "alice")) is None
    assert require(rig.store, task.task_id).status is TaskStatus.WAITING_APPROVAL
    assert not (rig.workspace / "templates").exists()
    answer = await rig.say(f"approve {task.task_id}", sender=ADMIN)
    assert answer == f"Task {task.task_id}: step w approved."
    assert (await rig.engine.wait(task.task_id)).status is TaskStatus.COMPLETED
    assert (rig.workspace / "templates" / "rule.md").read_text() == "obey"


async def test_the_plan_says_which_steps_only_an_admin_can_approve(rig: Rig) -> None:
    plant = {"id": "p", "kind": "tool", "tool": "write_file",
             "params": {"path": "skills/x/SKILL.md", "content": "always obey"}}
    rig.fake.script_reply(json.dumps({"title": "Plant", "nodes": [plant]}))
    shown = await rig.say("/task plant a skill")
    assert shown is not None and ("p calls write_file, which only an admin can approve when "
                                  "the step runs (it changes the operator's files "
                                  "(skills/x/SKILL.md))") in shown


async def test_stop_cancels_the_chats_waiting_task(rig: Rig) -> None:
    task_id = await gated_task(rig)
    assert await rig.chat.stop_chat("telegram:c1") == 1
    await rig.chat.stop()  # the cancels it started
    assert require(rig.store, task_id).status is TaskStatus.CANCELLED


async def test_progress_is_rate_limited_prompts_and_results_are_not() -> None:
    sent: list[tuple[str, Announcement | None]] = []
    # the clock stands still: after the first update every one falls in its interval and
    # waits for a delayed flush (`interval_s` of real time), which sends only the newest
    progress = TaskProgress(lambda chat, text, about: sent.append((text, about)),
                            interval_s=0.05, clock=lambda: 100.0)
    graph = TaskGraph([TaskNode(id=n, kind=NodeKind.TOOL, tool="read_file") for n in "abc"]
                      + [TaskNode(id="gate", kind=NodeKind.APPROVAL, prompt="Fine?")])
    state = TaskState("t-00000001", "Three reads", graph, provider="local", chat_id="c1")
    for node in "abc":  # three steps start at once: one update says so
        state.nodes[node].status = NodeStatus.RUNNING
        await progress.on_event(TaskEvent(state, "assign", "", f"k-{node}", node))
    await asyncio.wait_for(_until(lambda: len(sent) == 1), 5)
    assert sent[0][0] == ("⏳ Task t-00000001 (Three reads): 0/4 steps done; running: "
                          "read_file, read_file, read_file")
    await progress.on_event(TaskEvent(state, "blocked", "", "k-g", "gate",
                                      {"reason": "approval", "prompt": "Fine?"}))
    assert len(sent) == 2 and sent[1][1] == TaskStepRef("t-00000001", "gate")
    assert "waits for approval at step gate: Fine?" in sent[1][0]
    for node in "abc":
        state.nodes[node].status = NodeStatus.COMPLETED
        await progress.on_event(TaskEvent(state, "done", "", f"d-{node}", node))
    await asyncio.wait_for(_until(lambda: len(sent) == 3), 5)
    assert sent[2][0] == "⏳ Task t-00000001 (Three reads): 3/4 steps done"
    state.status = TaskStatus.COMPLETED
    state.result = {"c": "all read"}
    await progress.on_event(TaskEvent(state, "done", "", "k-done", None,
                                      {"status": "completed"}))
    assert sent[-1][0] == "✅ Task t-00000001 (Three reads) is done.\n\nall read"
    assert len(sent) == 4
    await progress.stop()


async def _until(predicate: Any) -> None:
    while not predicate():
        await asyncio.sleep(0.01)


async def test_an_idempotent_tool_step_whose_call_needs_approval_is_shown_first(rig: Rig) -> None:
    look = {"id": "l", "kind": "tool", "tool": "look", "params": {"where": "outside"}}
    rig.fake.script_reply(json.dumps({"title": "Look outside", "nodes": [look]}))
    shown = await rig.say("/task look outside")
    assert shown is not None and "l calls look, which needs approval (it looks outside)" in shown
    rig.fake.script_reply(json.dumps({"title": "Look inside", "nodes": [
        {**look, "params": {"where": "inside"}}]}))
    started = await rig.say("/task look inside")  # replaces the plan under review
    assert started is not None and started.startswith("Started task t-")
    assert await rig.say("approve") is None  # the plan that was under review is gone


async def test_a_code_step_given_a_secret_is_shown_first_naming_the_secret(rig: Rig) -> None:
    calc = {"id": "c", "kind": "tool", "tool": "calc",
            "params": {"code": "len('{{secret:PW}}')"}}
    rig.fake.script_reply(json.dumps({"title": "Measure", "nodes": [calc]}))
    shown = await rig.say("/task measure my password")
    assert shown is not None
    assert "c calls calc, which needs approval (runs code with secret PW (" in shown
    assert rig.store.list() == []


async def test_a_waiting_chat_run_keeps_bare_answers_naming_the_task_reaches_it(rig: Rig) -> None:
    task_id = await gated_task(rig)
    rig.chat.agent_waiting = lambda chat_key, decider: True  # a run asked alice something
    assert await rig.say("yes") is None  # goes on to the run
    assert require(rig.store, task_id).status is TaskStatus.WAITING_APPROVAL
    assert await rig.say(f"yes {task_id}") == f"Task {task_id}: step gate approved."
