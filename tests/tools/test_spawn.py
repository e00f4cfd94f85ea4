"""The spawn tool and the runtime's sub-agent runner, on a real AgentLoop with a fake model."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from soulflow.agent.run import events as ev
from soulflow.agent.run.loop import AgentLoop
from soulflow.agent.run.reducer import RunState
from soulflow.agent.tools.base import ChatRef, Tool, ToolContext, ToolServices
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.agent.tools.spawn import (
    SUBAGENT_BRIEF,
    SpawnTool,
    cancel_orphaned_subruns,
    run_subagent,
)
from soulflow.backends.file.runs import FileRunJournal
from soulflow.contracts import ProviderResult, ToolCall

PARENT_CHAT = ChatRef("local", "c1", None, "u1", session_key="local:c1")


class FakeModel:
    """Answers with queued results; `hang` makes the next call wait until cancelled."""

    name = "fake"

    def __init__(self, *results: ProviderResult) -> None:
        self.results = list(results)
        self.prompts: list[list[dict[str, Any]]] = []
        self.hang = False

    async def chat(self, messages: list[dict[str, Any]], tools: Any = None, **_: Any
                   ) -> ProviderResult:
        self.prompts.append(messages)
        if self.hang:
            await asyncio.Event().wait()
        return self.results.pop(0)

    async def close(self) -> None:
        return None


class Risky(Tool):
    name = "risky"
    description = "needs approval"
    parameters = {"type": "object", "properties": {}}

    def needs_approval(self, params: dict[str, Any], ctx: ToolContext) -> str | None:
        return "it is risky"

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> str:
        return "ran"


def tool_call(name: str, **arguments: Any) -> ProviderResult:
    return ProviderResult(content="", tool_calls=[ToolCall(id="c0", name=name,
                                                           arguments=arguments)])


def make_loop(tmp_path: Path, model: FakeModel) -> AgentLoop:
    """A loop wired like the runtime: sub-runs get no spawn service."""
    registry = ToolRegistry()
    registry.register(Risky())
    registry.register(SpawnTool())
    loop: AgentLoop

    def context(state: RunState, approved: bool) -> ToolContext:
        async def spawn(task: str, max_turns: int) -> str:
            return await run_subagent(loop, parent_chat=state.chat, task=task,
                                      max_turns=max_turns, parent_run=state.run_id)

        services = ToolServices(spawn=None if state.parent_run else spawn)
        return ToolContext(tmp_path, ChatRef("local", "c1"), approved=approved,
                           services=services)

    loop = AgentLoop(FileRunJournal(tmp_path / "threads"), lambda: model, registry,
                     lambda _chat: "system", context, max_turns=5)
    return loop


async def test_completed_subrun(tmp_path: Path) -> None:
    model = FakeModel(ProviderResult(content="42 files"))
    loop = make_loop(tmp_path, model)
    text = await run_subagent(loop, parent_chat=PARENT_CHAT, task="count files",
                              max_turns=3, parent_run="run_parent")
    run_id = text.split()[1].rstrip(":]")
    assert text == f"[sub-agent {run_id}: completed]\n42 files"
    state = loop.store.state(run_id)
    assert state.parent_run == "run_parent" and state.max_turns == 3
    assert state.chat.session_key == "" and state.chat.chat_id == "c1"
    assert model.prompts[0][-1] == {"role": "user", "content": SUBAGENT_BRIEF + "count files"}


async def test_subrun_needing_approval_fails_clearly(tmp_path: Path) -> None:
    loop = make_loop(tmp_path, FakeModel(tool_call("risky")))
    text = await run_subagent(loop, parent_chat=PARENT_CHAT, task="do it", max_turns=5,
                              parent_run="run_parent")
    assert ": failed] It stopped because `risky` needs the user's approval (it is risky)" in text
    assert "Do that step yourself" in text
    run_id = text.split()[1].rstrip(":]")
    assert loop.store.state(run_id).status == ev.CANCELLED
    assert loop.store.find(chat_key="local:c1") == []  # nothing left waiting in the chat


async def test_subrun_asking_the_user_fails_clearly(tmp_path: Path) -> None:
    loop = make_loop(tmp_path, FakeModel(tool_call("request_more_information",
                                                   question="Which folder?")))
    text = await run_subagent(loop, parent_chat=PARENT_CHAT, task="tidy up", max_turns=5,
                              parent_run="run_parent")
    assert "It wanted to ask the user: 'Which folder?'" in text
    assert loop.store.find() == []


async def test_cancelling_the_call_cancels_the_subrun(tmp_path: Path) -> None:
    model = FakeModel()
    model.hang = True
    loop = make_loop(tmp_path, model)
    task = asyncio.create_task(run_subagent(loop, parent_chat=PARENT_CHAT, task="slow",
                                            max_turns=5, parent_run="run_parent"))
    while not model.prompts:
        await asyncio.sleep(0)
    [run_id] = loop.store.find()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert loop.store.state(run_id).status == ev.CANCELLED


async def test_spawn_tool_end_to_end_and_no_nested_spawn(tmp_path: Path) -> None:
    model = FakeModel(
        tool_call("spawn", task="summarise", max_turns=2),  # parent
        tool_call("spawn", task="deeper"),  # sub-run tries to recurse
        ProviderResult(content="summary: fine"),  # sub-run gives up and answers
        ProviderResult(content="The sub-agent says: fine"),  # parent
    )
    loop = make_loop(tmp_path, model)
    parent = loop.begin(chat=PARENT_CHAT, text="go", history=[])
    outcome = await loop.drive(parent)
    assert (outcome.status, outcome.text) == (ev.COMPLETED, "The sub-agent says: fine")
    nested_result = model.prompts[2][-1]["content"]
    assert nested_result.startswith("Error: spawn is not available here (a sub-agent cannot")
    spawn_result = model.prompts[3][-1]["content"]
    assert ": completed]\nsummary: fine" in spawn_result


async def test_spawn_tool_arguments(tmp_path: Path) -> None:
    calls: list[tuple[str, int]] = []

    async def spawn(task: str, max_turns: int) -> str:
        calls.append((task, max_turns))
        return "[sub-agent run_x: completed]\nok"

    registry = ToolRegistry()
    registry.register(SpawnTool())
    ctx = ToolContext(tmp_path, ChatRef("local", "c1"), services=ToolServices(spawn=spawn))
    result = await registry.execute("spawn", {"task": "t"}, ctx)
    assert result.output == "[sub-agent run_x: completed]\nok" and calls == [("t", 5)]
    result = await registry.execute("spawn", {"task": "t", "max_turns": 21}, ctx)
    assert result.status == "error" and "21 is greater than the maximum of 20" in result.output
    assert SpawnTool().timeout_for({"task": "t", "max_turns": 20}) == 60 + 90 * 20


async def test_orphaned_subruns_are_cancelled_at_boot(tmp_path: Path) -> None:
    loop = make_loop(tmp_path, FakeModel())
    orphan = loop.begin(chat=PARENT_CHAT, text="sub", history=[], parent_run="run_parent")
    normal = loop.begin(chat=PARENT_CHAT, text="main", history=[])
    rebooted = AgentLoop(FileRunJournal(tmp_path / "threads"), lambda: FakeModel(), loop.tools,
                         lambda _chat: "system", lambda state, approved: ToolContext(
                             tmp_path, ChatRef("local", "c1")))
    assert await cancel_orphaned_subruns(rebooted) == 1
    assert rebooted.store.state(orphan).status == ev.CANCELLED
    assert rebooted.store.find() == [normal]
