"""The event-thread agent loop: reducer, tools, approvals, intents, crash recovery."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from soulflow.agent.approvals import parse_decision, parse_reaction
from soulflow.agent.run import events as ev
from soulflow.agent.run.loop import INTERRUPTED, AgentLoop
from soulflow.agent.run.reducer import apply, fold
from soulflow.agent.tools.base import ChatRef, Tool, ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.backends.file.runs import FileRunJournal
from soulflow.contracts import ProviderError, ProviderResult, ToolCall
from tests.agent.recorder import Recorder


class ScriptedModel:
    name = "scripted"

    def __init__(self, *turns: ProviderResult | ProviderError) -> None:
        self.turns = list(turns)
        self.seen: list[list[dict[str, Any]]] = []

    async def chat(self, messages: list[dict[str, Any]], tools: Any = None, *,
                   on_stream: Any = None, abort: Any = None) -> ProviderResult:
        self.seen.append(messages)
        turn = self.turns.pop(0)
        if isinstance(turn, ProviderError):
            raise turn
        return turn

    async def close(self) -> None:
        return None


def call(name: str, **arguments: Any) -> ProviderResult:
    return ProviderResult(content="", tool_calls=[ToolCall(id=f"c_{name}", name=name,
                                                           arguments=arguments)])


def reply(text: str) -> ProviderResult:
    return ProviderResult(content=text)


def make_loop(tmp_path: Path, model: ScriptedModel, tool: Tool, max_turns: int = 5) -> AgentLoop:
    registry = ToolRegistry()
    registry.register(tool)

    def context(state: Any, approved: bool) -> ToolContext:
        return ToolContext(workspace=tmp_path, chat=ChatRef("local", "c"), approved=approved)

    return AgentLoop(FileRunJournal(tmp_path / "threads"), lambda: model, registry,
                     lambda _chat: "system prompt", context, max_turns=max_turns)


def begin(loop: AgentLoop, text: str = "do it") -> str:
    return loop.begin(chat=ChatRef("local", "c"), text=text, history=[])


async def test_plain_answer(tmp_path: Path) -> None:
    model = ScriptedModel(reply("hello"))
    loop = make_loop(tmp_path, model, Recorder())
    outcome = await loop.drive(begin(loop, "hi"))
    assert (outcome.status, outcome.text) == (ev.COMPLETED, "hello")
    assert model.seen[0][0] == {"role": "system", "content": "system prompt"}
    assert model.seen[0][-1] == {"role": "user", "content": "hi"}


async def test_tool_call_then_answer_and_the_thread_replays(tmp_path: Path) -> None:
    tool = Recorder()
    model = ScriptedModel(call("record", value="x"), reply("done with x"))
    loop = make_loop(tmp_path, model, tool)
    run_id = begin(loop)
    outcome = await loop.drive(run_id)
    assert outcome.text == "done with x" and tool.calls == ["x"]
    assert model.seen[1][-1] == {"role": "tool", "tool_call_id": "t1.c_record",
                                 "content": "recorded x"}
    types = [e.type for e in loop.store.events(run_id)]
    assert types == [ev.RUN_STARTED, ev.MODEL_TURN, ev.TOOL_CALL_STARTED, ev.TOOL_RESULT,
                     ev.MODEL_TURN, ev.DONE]
    replayed = fold(loop.store.events(run_id))
    assert replayed.status == ev.COMPLETED and replayed.turns == 2


def test_reducer_is_pure() -> None:
    start = ev.Event(ev.RUN_STARTED, {"run_id": "r", "text": "hi", "history": []})
    state = apply(fold([]), start)
    after = apply(state, ev.Event(ev.MODEL_TURN, {"content": "a", "tool_calls": []}))
    assert state.turns == 0 and after.turns == 1
    assert len(state.conversation) == 1 and len(after.conversation) == 2


async def test_approval_by_decision_runs_the_same_call(tmp_path: Path) -> None:
    tool = Recorder(risky=True)
    model = ScriptedModel(call("record", value="secret plan"), reply("recorded it"))
    loop = make_loop(tmp_path, model, tool)
    run_id = begin(loop)
    waiting = await loop.drive(run_id)
    assert waiting.status == ev.WAITING_APPROVAL and waiting.approval_id
    assert "Approval needed" in waiting.text and "it records things" in waiting.text
    assert tool.calls == []
    # a restart in between: a new loop on the same files sees the pending approval
    loop = make_loop(tmp_path, model, tool)
    assert loop.store.find(chat_key="local:c", statuses=frozenset({ev.WAITING_APPROVAL})) == \
        [run_id]
    loop.decide(run_id, waiting.approval_id, "approve", "alice")
    done = await loop.drive(run_id)
    assert done.text == "recorded it" and tool.calls == ["secret plan"]


async def test_denied_call_is_reported_to_the_model(tmp_path: Path) -> None:
    tool = Recorder(risky=True)
    model = ScriptedModel(call("record", value="x"), reply("ok, I won't"))
    loop = make_loop(tmp_path, model, tool)
    run_id = begin(loop)
    waiting = await loop.drive(run_id)
    loop.decide(run_id, waiting.approval_id, "deny")
    assert (await loop.drive(run_id)).text == "ok, I won't"
    assert "denied" in model.seen[1][-1]["content"] and tool.calls == []


async def test_defer_keeps_waiting_and_cancel_ends_the_run(tmp_path: Path) -> None:
    tool = Recorder(risky=True)
    loop = make_loop(tmp_path, ScriptedModel(call("record", value="x")), tool)
    run_id = begin(loop)
    waiting = await loop.drive(run_id)
    loop.decide(run_id, waiting.approval_id, "defer")
    assert (await loop.drive(run_id)).status == ev.WAITING_APPROVAL
    loop.decide(run_id, waiting.approval_id, "cancel")
    assert (await loop.drive(run_id)).status == ev.CANCELLED
    assert tool.calls == []


async def test_request_more_information_waits_for_the_user(tmp_path: Path) -> None:
    model = ScriptedModel(call("request_more_information", question="Which file?"),
                          reply("Reading notes.md"))
    loop = make_loop(tmp_path, model, Recorder())
    run_id = begin(loop)
    waiting = await loop.drive(run_id)
    assert (waiting.status, waiting.text) == (ev.WAITING_USER, "Which file?")
    loop.answer(run_id, "notes.md")
    assert (await loop.drive(run_id)).text == "Reading notes.md"
    assert "The user answered: notes.md" in model.seen[1][-1]["content"]


async def test_done_for_now_and_max_turns(tmp_path: Path) -> None:
    loop = make_loop(tmp_path, ScriptedModel(call("done_for_now", answer="All set.")),
                     Recorder())
    assert (await loop.drive(begin(loop))).text == "All set."
    model = ScriptedModel(*[call("record", value=str(i)) for i in range(10)])
    loop = make_loop(tmp_path, model, Recorder(), max_turns=3)
    outcome = await loop.drive(begin(loop))
    assert outcome.status == ev.MAX_TURNS_REACHED and "after 3 steps" in outcome.text


async def test_provider_error_and_abort(tmp_path: Path) -> None:
    loop = make_loop(tmp_path, ScriptedModel(ProviderError("server", "down")), Recorder())
    outcome = await loop.drive(begin(loop))
    assert outcome.status == ev.FAILED and "(server)" in outcome.text
    abort = asyncio.Event()
    abort.set()
    loop = make_loop(tmp_path, ScriptedModel(reply("never")), Recorder())
    assert (await loop.drive(begin(loop), abort)).status == ev.CANCELLED


async def test_interrupted_tool_is_not_rerun_unless_idempotent(tmp_path: Path) -> None:
    tool = Recorder()
    model = ScriptedModel(call("record", value="x"), reply("noted"))
    loop = make_loop(tmp_path, model, tool)
    run_id = begin(loop)
    loop.store.append(run_id, ev.Event(ev.MODEL_TURN, {"content": "", "tool_calls": [
        {"id": "c1", "name": "record", "arguments": {"value": "x"}}]}))
    loop.store.append(run_id, ev.Event(ev.TOOL_CALL_STARTED, {"id": "c1", "name": "record"}))
    model.turns = [reply("noted")]
    fresh = make_loop(tmp_path, model, tool)  # as after kill -9
    outcome = await fresh.drive(run_id)
    assert outcome.text == "noted" and tool.calls == []
    assert model.seen[-1][-1]["content"] == INTERRUPTED
    tool.idempotent = True
    run_id = begin(fresh)
    fresh.store.append(run_id, ev.Event(ev.MODEL_TURN, {"content": "", "tool_calls": [
        {"id": "c2", "name": "record", "arguments": {"value": "y"}}]}))
    fresh.store.append(run_id, ev.Event(ev.TOOL_CALL_STARTED, {"id": "c2", "name": "record"}))
    model.turns = [reply("again")]
    assert (await make_loop(tmp_path, model, tool).drive(run_id)).text == "again"
    assert tool.calls == ["y"]


async def test_text_tool_calls_are_parsed(tmp_path: Path) -> None:
    tool = Recorder()
    text = 'Sure.\n```tool_call\n{"name": "record", "arguments": {"value": "t"}}\n```'
    loop = make_loop(tmp_path, ScriptedModel(reply(text), reply("ok")), tool)
    assert (await loop.drive(begin(loop))).text == "ok" and tool.calls == ["t"]


@pytest.mark.parametrize(("text", "decision"), [
    ("approve", "approve"), ("Yes!", "approve"), ("승인", "approve"), ("✅", "approve"),
    ("no", "deny"), ("거부", "deny"), ("later", "defer"), ("보류", "defer"),
    ("cancel", "cancel"), ("취소", "cancel"), ("why?", "clarify"),
    ("approve ap_0123abcd", "approve")])
def test_decision_words(text: str, decision: str) -> None:
    parsed = parse_decision(text)
    assert parsed is not None and parsed[0] == decision


def test_sentences_are_not_decisions() -> None:
    assert parse_decision("no idea what you mean, can you write a poem") is None
    assert parse_decision("yes please write the report about X") is None
    assert parse_decision("approve ap_0123abcd")[1] == "ap_0123abcd"
    assert parse_reaction("white_check_mark") == "approve"
    assert parse_reaction("👎") == "deny" and parse_reaction("tada") is None
