"""What a run hands a stream: each model call's text as written, never tool-call text, and
the platform ids the stream records, kept per leg in the run's journal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from soulflow.agent.run import events as ev
from soulflow.agent.run.loop import AgentLoop
from soulflow.agent.run.showing import ShownLeg
from soulflow.agent.tools.base import ChatRef, ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.backends.file.runs import FileRunJournal
from soulflow.contracts import ProviderResult, ToolCall
from tests.agent.recorder import Recorder


class WritingModel:
    """Streams each scripted answer to `on_stream` in small pieces, then returns it."""

    name = "writing"

    def __init__(self, *answers: str | ProviderResult) -> None:
        self.answers = list(answers)

    async def chat(self, messages: list[dict[str, Any]], tools: Any = None, *,
                   on_stream: Any = None, abort: Any = None) -> ProviderResult:
        answer = self.answers.pop(0)
        result = answer if isinstance(answer, ProviderResult) else ProviderResult(answer)
        if on_stream is not None:
            for start in range(0, len(result.content), 7):
                on_stream(result.content[start:start + 7])
        return result

    async def close(self) -> None:
        return None


class SeenStream:
    def __init__(self) -> None:
        self.legs: list[ShownLeg] = []
        self.calls: list[str] = []  # the text of each model call, as fed

    def begin(self, leg: ShownLeg) -> None:
        self.legs.append(leg)

    def restart(self) -> None:
        self.calls.append("")

    def feed(self, text: str) -> None:
        self.calls[-1] += text


def make_loop(tmp_path: Path, model: WritingModel) -> AgentLoop:
    registry = ToolRegistry()
    registry.register(Recorder())

    def context(state: Any, approved: bool) -> ToolContext:
        return ToolContext(workspace=tmp_path, chat=ChatRef("local", "c"), approved=approved)

    return AgentLoop(FileRunJournal(tmp_path / "threads"), lambda: model, registry,
                     lambda _chat: "system prompt", context)


async def test_a_tool_call_written_as_text_is_never_fed_to_the_stream(tmp_path: Path) -> None:
    preamble = "Let me record that first.\n"
    model = WritingModel(
        preamble + '```tool_call\n{"name": "record", "arguments": {"value": "x"}}\n```',
        "Recorded: the answer is 42.")
    loop = make_loop(tmp_path, model)
    stream = SeenStream()
    run_id = loop.begin(chat=ChatRef("local", "c"), text="do it", history=[])
    outcome = await loop.drive(run_id, stream=stream)
    assert outcome.text == "Recorded: the answer is 42."
    assert stream.calls == [preamble, "Recorded: the answer is 42."]


async def test_a_native_tool_call_shows_only_the_text_of_its_turn(tmp_path: Path) -> None:
    model = WritingModel(
        ProviderResult("Checking.", [ToolCall(id="c1", name="record",
                                              arguments={"value": "y"})]),
        "All done.")
    loop = make_loop(tmp_path, model)
    stream = SeenStream()
    run_id = loop.begin(chat=ChatRef("local", "c"), text="go", history=[])
    await loop.drive(run_id, stream=stream)
    assert stream.calls == ["Checking.", "All done."]


async def test_shown_ids_are_journaled_per_leg_and_a_new_drive_starts_from_them(
        tmp_path: Path) -> None:
    loop = make_loop(tmp_path, WritingModel("first answer", "again"))
    run_id = loop.begin(chat=ChatRef("local", "c"), text="go", history=[])
    stream = SeenStream()
    await loop.drive(run_id, stream=stream)
    leg = stream.legs[0]
    assert (leg.run_id, leg.leg, leg.shown) == (run_id, 0, ())
    leg.record(0, "m1")
    leg.record(1, "m2")
    leg.record(1, "m3")  # piece 1 was posted anew (its message was deleted)
    state = loop.store.state(run_id)
    assert state.shown == ["m1", "m3"] and state.leg == 0
    # an answer to a question starts a new leg: nothing of the old one is edited
    loop.store.append(run_id, ev.Event(ev.USER_REPLY, {"text": "more"}))
    state = loop.store.state(run_id)
    assert state.shown == [] and state.leg == 1
