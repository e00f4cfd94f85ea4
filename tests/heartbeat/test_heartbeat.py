"""The heartbeat: skip without a model call, notify only when not HEARTBEAT_OK, a bounded
session, and its schedule on an injected clock - against the loopback fake model."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from soulflow.agent.consolidate import CONSOLIDATED_TYPE
from soulflow.agent.tools.base import Tool, ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.backends.file.heartbeat import FileHeartbeatState
from soulflow.contracts import QUIET_TURN_ORIGIN, ApprovalRef, ChatRef
from soulflow.heartbeat import (
    HEARTBEAT_SESSION,
    HeartbeatService,
    TickStatus,
    TurnStatus,
    actionable_lines,
    is_ok_reply,
)
from soulflow.scaffold import ensure_workspace
from soulflow.security.zones import zone_for
from tests.fakes.openai_api import FakeOpenAI
from tests.heartbeat.stack import Stack, build_stack

TARGET = ChatRef("telegram", "-100200")
CHECKLIST = "# Heartbeat checklist\n\n- [ ] Check that the backup of /srv ran today\n"


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def stack(tmp_path: Path, fake: FakeOpenAI) -> AsyncIterator[Stack]:
    built = build_stack(tmp_path / "ws", fake.base_url, history=2)
    yield built
    await built.close()


def heartbeat(stack: Stack, clock: Clock, interval_s: float = 1800.0) -> HeartbeatService:
    return HeartbeatService(stack.workspace, heartbeat_state(stack), stack.runner, TARGET,
                            interval_s=interval_s, clock=clock)


def heartbeat_state(stack: Stack) -> FileHeartbeatState:
    return FileHeartbeatState(stack.workspace / "runtime" / "heartbeat" / "state.json")


def write_checklist(stack: Stack, text: str) -> None:
    (stack.workspace / "HEARTBEAT.md").write_text(text, encoding="utf-8")


# ----------------------------------------------------------------- the checklist


def test_template_headings_comments_and_empty_boxes_are_not_work(tmp_path: Path) -> None:
    ensure_workspace(tmp_path)
    assert actionable_lines((tmp_path / "HEARTBEAT.md").read_text()) == []
    assert actionable_lines("# Title\n## Sub\n<!-- check the disk -->\n<!--\nmulti\n-->\n"
                            "- [ ]\n* [ ] \n- \n(an aside)\n---\n\n") == []
    assert actionable_lines("# T\n- [ ] check the disk\n") == ["- [ ] check the disk"]
    assert actionable_lines("Look at the error log") == ["Look at the error log"]


@pytest.mark.parametrize(("reply", "ok"), [
    ("HEARTBEAT_OK", True), ("  HEARTBEAT_OK.\n", True), ("**HEARTBEAT_OK**", True),
    ("`HEARTBEAT_OK`", True), ("HEARTBEAT_OK - but the disk is 95% full", False),
    ("The backup did not run.", False), ("", False),
])
def test_only_the_bare_token_is_the_all_clear(reply: str, ok: bool) -> None:
    assert is_ok_reply(reply) is ok


# ----------------------------------------------------------------- ticks


async def test_a_checklist_without_work_costs_no_model_call(stack: Stack,
                                                            fake: FakeOpenAI) -> None:
    ensure_workspace(stack.workspace)  # the template: a heading and a hint in parentheses
    service = heartbeat(stack, Clock())
    result = await service.tick()
    assert result.status is TickStatus.SKIPPED
    (stack.workspace / "HEARTBEAT.md").unlink()
    assert (await service.tick()).status is TickStatus.MISSING
    assert fake.requests == [] and stack.posted == []
    assert service.model_calls == 0 and service.ticks == 2


async def test_all_clear_is_quiet_and_anything_else_is_posted(stack: Stack,
                                                              fake: FakeOpenAI) -> None:
    write_checklist(stack, CHECKLIST)
    clock = Clock()
    service = heartbeat(stack, clock)
    fake.script_reply("HEARTBEAT_OK")
    result = await service.tick()
    assert result.status is TickStatus.RAN and result.outcome is not None
    assert result.outcome.status is TurnStatus.OK
    assert stack.posted == []
    sent = fake.requests[0].json["messages"]
    assert "Check that the backup of /srv ran today" in sent[-1]["content"]
    assert "HEARTBEAT_OK" in sent[-1]["content"]

    clock.now += 1800
    fake.script_reply("The backup of /srv did not run today.")
    result = await service.tick()
    assert result.outcome is not None and result.outcome.status is TurnStatus.NOTIFIED
    [(chat, text, _)] = stack.posted
    assert chat == TARGET
    assert text == "[heartbeat] The backup of /srv did not run today."
    # its own session: the user's chat session is untouched
    assert [r["role"] for r in stack.sessions.last(HEARTBEAT_SESSION, 10)] == \
        ["user", "assistant", "user", "assistant"]
    assert stack.sessions.last("telegram:-100200", 10) == []


async def test_the_session_is_bounded_history_capped_and_older_turns_consolidated(
        tmp_path: Path, fake: FakeOpenAI) -> None:
    stack = build_stack(tmp_path / "ws", fake.base_url, history=2, consolidate_after=4)
    try:
        write_checklist(stack, CHECKLIST)
        clock = Clock()
        service = heartbeat(stack, clock)
        for _ in range(3):
            fake.script_reply("HEARTBEAT_OK")
            await service.tick()
            clock.now += 1800
        # three turns = six messages: past the threshold of 4, the older ones are summarised
        # (in the background, right after the third turn)
        fake.script_reply("SUMMARY:\nThe heartbeat checked the /srv backup three times.\n\n"
                          "FACTS:\n- none")

        async def consolidated() -> None:
            while not any(r.get("_type") == CONSOLIDATED_TYPE
                          for r in stack.sessions.last(HEARTBEAT_SESSION, 20)):
                await asyncio.sleep(0.01)

        await asyncio.wait_for(consolidated(), 10)
        fake.script_reply("HEARTBEAT_OK")
        await service.tick()
        # the heartbeat's own zone holds it: not global memory, not the target chat's
        own = stack.memory.for_zone(zone_for(ChatRef(
            "telegram", "-100200", origin=QUIET_TURN_ORIGIN, session_key=HEARTBEAT_SESSION)))
        assert own.rel.as_posix() == "chats/quiet-heartbeat/memory"
        assert "checked the /srv backup three times" in own.read_daily()
        assert stack.memory.read_daily() == ""
        assert not (stack.workspace / "chats" / "telegram--100200").exists()
        assert "chats/quiet-heartbeat/" in fake.requests[-1].json["messages"][0]["content"]
        # every model call of a heartbeat saw at most 2 earlier messages of the session
        for request in fake.requests:
            messages = request.json["messages"]
            if "SUMMARY" in messages[0]["content"]:
                continue  # the consolidation request
            history = messages[1:-1]
            assert len(history) <= 2
            assert all(m["role"] in ("user", "assistant") for m in history)
        assert service.model_calls == 4
    finally:
        await stack.close()


async def test_the_schedule_survives_a_restart_on_the_injected_clock(stack: Stack,
                                                                     fake: FakeOpenAI) -> None:
    write_checklist(stack, "# nothing yet\n")
    clock = Clock()
    first = heartbeat(stack, clock)
    assert first.seconds_until_next() == 60.0  # never ran: shortly after boot
    await first.tick()
    clock.now += 600
    assert first.seconds_until_next() == 1200.0
    again = heartbeat(stack, clock)  # a restart: the last tick is read back
    assert again.seconds_until_next() == 1200.0
    clock.now += 5000
    assert again.seconds_until_next() == 0.0
    assert heartbeat(stack, clock, interval_s=0).enabled is False


async def test_the_supervised_loop_ticks_and_stops_cleanly(stack: Stack,
                                                           fake: FakeOpenAI) -> None:
    write_checklist(stack, "# nothing yet\n")
    clock = Clock()
    slept: list[float] = []
    ticked = asyncio.Event()

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.now += seconds
        if len(slept) > 2:
            ticked.set()
            await asyncio.Event().wait()  # park until cancelled

    service = HeartbeatService(stack.workspace, heartbeat_state(stack), stack.runner,
                               TARGET, interval_s=1800, clock=clock, sleep=sleep)
    task = asyncio.create_task(service.run())
    await asyncio.wait_for(ticked.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert slept == [60.0, 1800.0, 1800.0] and service.ticks == 2


async def test_an_occurrence_runs_once_and_an_interrupted_turn_is_cancelled_at_boot(
        stack: Stack, fake: FakeOpenAI) -> None:
    write_checklist(stack, CHECKLIST)
    clock = Clock()
    service = heartbeat(stack, clock)
    fake.script_reply("HEARTBEAT_OK")
    await service.tick()
    again = await service.tick()  # same second: the same occurrence key
    assert again.outcome is not None and again.outcome.status is TurnStatus.DUPLICATE
    assert len(fake.requests) == 1

    clock.now += 1800
    fake.script_delay(30)  # the model hangs; the daemon stops meanwhile
    tick = asyncio.create_task(service.tick())
    async with asyncio.timeout(5):
        await fake.wait_for_requests(2)
    tick.cancel()
    await asyncio.gather(tick, return_exceptions=True)
    assert await stack.agent.running_runs()  # left running in the journal
    # several daemons: a node cancels only those of chats it holds (none elsewhere drives)
    assert await stack.runner.cancel_interrupted(owns=lambda chat: chat != TARGET.key) == 0
    assert await stack.agent.running_runs()
    assert await stack.runner.cancel_interrupted() == 1  # what the next boot does first
    assert await stack.agent.running_runs() == []


class RestartService(Tool):
    """A risky tool: the heartbeat may want it, an admin must approve it."""

    name = "restart_service"
    description = "restart a system service"
    parameters = {"type": "object", "properties": {"name": {"type": "string"}},
                  "required": ["name"]}

    def __init__(self) -> None:
        self.restarted: list[str] = []

    def needs_approval(self, params: dict[str, Any], ctx: ToolContext) -> str | None:
        return "it restarts a service"

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> str:
        self.restarted.append(params["name"])
        return "restarted"


async def test_a_heartbeat_waiting_for_approval_asks_the_chat_and_is_not_started_again(
        tmp_path: Path, fake: FakeOpenAI) -> None:
    tool = RestartService()
    registry = ToolRegistry()
    registry.register(tool)
    stack = build_stack(tmp_path / "ws", fake.base_url, tools=registry)
    try:
        write_checklist(stack, "- [ ] If nginx is down, restart it.\n")
        clock = Clock()
        service = heartbeat(stack, clock)
        fake.script_tool_call("restart_service", {"name": "nginx"})
        result = await service.tick()
        assert result.outcome is not None and result.outcome.status is TurnStatus.WAITING
        [(chat, text, approval)] = stack.posted
        assert chat == TARGET and text.startswith("[heartbeat] Approval needed")
        assert isinstance(approval, ApprovalRef) and approval.approval_id
        assert approval.run_id == result.outcome.run_id
        # nobody in the chat asked for it: its requester is empty, so only an admin decides
        assert stack.agent.chat_of_run(result.outcome.run_id).requester_id == ""

        clock.now += 1800
        later = await service.tick()
        assert later.outcome is not None and later.outcome.status is TurnStatus.BUSY
        assert len(fake.requests) == 1 and tool.restarted == []
    finally:
        await stack.close()
