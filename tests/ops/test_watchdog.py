"""The watchdog: a stalled channel loop is restarted through its supervisor, a stuck run is
aborted or cancelled with its reason recorded, and runs that wait for an approval (or whose
sub-agent still works) are left alone. Real Supervisor, reader loop, HealthBoard,
FileRunJournal and AgentLoop; time is an injected clock."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from soulflow.agent.run import events as ev
from soulflow.agent.run.loop import AgentLoop
from soulflow.agent.tools.base import ChatRef, ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.backends.file.runs import FileRunJournal
from soulflow.channels.base import ChannelAdapter
from soulflow.channels.health import HealthBoard, LinkState
from soulflow.channels.reader import ReadPolicy, run_channel
from soulflow.contracts import InboundMessage, OutboundMessage, SendResult
from soulflow.conversation.runs import ActiveRuns
from soulflow.ops.watchdog import Action, ChannelWatch, RunWatch, WatchLog
from soulflow.supervisor import Supervisor
from tests.ops.clock import T0, Clock
from tests.waiting import until


async def _check(watch: RunWatch, now: float) -> list[Action]:
    """One watchdog round as the ops tick runs it: read the running runs, act on them."""
    return watch.check(now, await watch.running(now))


class WedgingChannel(ChannelAdapter):
    """A platform client whose first connect never returns (a half-open TCP connection the
    library waits on forever) - the read loop's own stall timer never starts for it."""

    name = "wedgy"

    def __init__(self) -> None:
        self.starts = 0
        self.stops = 0
        self.reads = 0
        self.connected = asyncio.Event()

    async def start(self) -> None:
        self.starts += 1
        if self.starts == 1:
            await asyncio.Event().wait()
        self.connected.set()

    async def stop(self) -> None:
        self.stops += 1

    async def read(self) -> list[InboundMessage]:
        self.reads += 1
        await asyncio.sleep(0.01)  # a short long-poll that finds nothing: the loop keeps reading
        return []

    async def send(self, message: OutboundMessage) -> SendResult:
        return SendResult(ok=True)


async def test_a_stalled_channel_loop_is_restarted_with_its_reason() -> None:
    clock = Clock()
    health = HealthBoard(clock=clock)
    adapter = WedgingChannel()
    supervisor = Supervisor()
    supervisor.spawn("channel:wedgy", lambda: run_channel(
        adapter, lambda a, batch: None, health, ReadPolicy(stall_after_s=120)))
    log = WatchLog()

    def restart(name: str, reason: str) -> bool:
        return supervisor.restart(f"channel:{name}", reason, cleanup=adapter.stop)

    watch = ChannelWatch(health, lambda: ["wedgy"], stall_after_s=600, restart=restart,
                         log_=log)
    try:
        await until(lambda: adapter.starts >= 1)  # connecting (and will hang there)
        assert watch.check(clock.now) == []  # first sight: the clock starts
        clock.now += 599
        assert watch.check(clock.now) == []
        assert health.get("wedgy").state is LinkState.CONNECTING
        clock.now += 2
        [action] = watch.check(clock.now)
        assert action.kind == "channel_restarted" and action.target == "wedgy"
        assert "no read and no error for 601s" in action.reason
        await asyncio.wait_for(adapter.connected.wait(), 5)  # the second connect works
        await until(lambda: adapter.reads >= 3)
        assert adapter.starts == 2 and adapter.stops == 1  # stopped in between
        record = health.get("wedgy")
        assert record.state is LinkState.CONNECTED and record.restarts == 1
        [loop] = supervisor.status()
        assert loop["running"] and loop["restarts"] == 1
        assert str(loop["last_error"]).startswith("restarted: no read and no error")
        # reading again: the watchdog leaves it alone however much time passes between reads
        for _ in range(3):
            clock.now += 500
            reads = adapter.reads
            await until(lambda reads=reads: adapter.reads > reads)  # it read in between
            assert watch.check(clock.now) == []
        assert list(log.actions) == [action]
    finally:
        await supervisor.stop(1)


# ----------------------------------------------------------------- runs


def make_loop(tmp_path: Path) -> AgentLoop:
    def context(state: Any, approved: bool) -> ToolContext:
        return ToolContext(workspace=tmp_path, chat=ChatRef("telegram", "1"), approved=approved)

    async def never(*_: Any, **__: Any) -> Any:
        raise AssertionError("the watchdog never calls the model")

    return AgentLoop(FileRunJournal(tmp_path / "threads"), lambda: never,  # type: ignore[arg-type,return-value]
                     ToolRegistry(), lambda _chat: "system", context)


def start_run(loop: AgentLoop, chat_id: str, at: float, *, parent: str | None = None,
              approval: bool = False, task_id: str = "") -> str:
    """A run that called a tool at `at` and, with `approval`, now waits for a decision."""
    run_id = loop.begin(chat=ChatRef("telegram", chat_id, task_id=task_id), text="go",
                        history=[], parent_run=parent)
    store = loop.store
    store.append(run_id, ev.Event(ev.MODEL_TURN, {
        "content": "", "tool_calls": [{"id": "t1.c", "name": "exec", "arguments": {}}]}, at))
    if approval:
        store.append(run_id, ev.Event(ev.APPROVAL_REQUESTED, {
            "approval_id": "ap_1", "call_id": "t1.c", "tool": "exec", "arguments": {},
            "reason": "risky"}, at))
    else:
        store.append(run_id, ev.Event(ev.TOOL_CALL_STARTED, {"id": "t1.c", "name": "exec"}, at))
    return run_id


async def test_stuck_runs_are_stopped_with_a_reason_and_approval_waits_are_left_alone(
        tmp_path: Path) -> None:
    loop = make_loop(tmp_path)
    runs = ActiveRuns()
    log = WatchLog()
    old = T0 - 3600
    waiting = start_run(loop, "approver", old, approval=True)
    orphan = start_run(loop, "orphan", old)  # nothing drives it any more
    driven = start_run(loop, "driven", old)  # its chat's turn holds an abort event
    parent = start_run(loop, "parent", old)  # waits on a sub-agent that still works
    start_run(loop, "parent", T0 - 5, parent=parent)
    fresh = start_run(loop, "fresh", T0 - 60)
    watch = RunWatch(lambda: loop, stuck_after_s=900, stop_chat=runs.stop,
                     abort_run=lambda run_id: False, log_=log)

    with runs.track("telegram:driven") as abort:
        actions = await _check(watch, T0)
        assert {(a.kind, a.target) for a in actions} == {("run_cancelled", orphan),
                                                         ("run_aborted", driven)}
        assert abort.is_set()  # the driver was asked to stop
        orphan_state = loop.store.state(orphan)
        assert orphan_state.status == ev.CANCELLED
        assert "stopped by the watchdog: no progress for 60 min" in (orphan_state.final or "")
        errors = [e for e in loop.store.events(driven) if e.type == ev.ERROR]
        assert errors and errors[-1].data["kind"] == "watchdog"
        # the driver did not stop within the grace: cancelled outright, reason kept
        assert await _check(watch, T0 + 30) == []
        [late] = await _check(watch, T0 + 61)
        assert (late.kind, late.target) == ("run_cancelled", driven)
        assert "did not stop when asked" in (loop.store.state(driven).final or "")

    assert loop.store.state(waiting).status == ev.WAITING_APPROVAL
    assert loop.store.state(parent).status == ev.RUNNING
    assert loop.store.state(fresh).status == ev.RUNNING
    assert await _check(watch, T0 + 120) == []  # nothing else is stuck
    assert sorted(a.target for a in log.actions) == sorted([orphan, driven, driven])
    loop.store.close()


async def test_a_quiet_turn_is_aborted_through_its_runner(tmp_path: Path) -> None:
    loop = make_loop(tmp_path)
    stuck = start_run(loop, "hb", T0 - 3600)
    asked: list[str] = []

    def abort_run(run_id: str) -> bool:
        asked.append(run_id)
        return True

    watch = RunWatch(lambda: loop, stuck_after_s=900, stop_chat=lambda key: 0,
                     abort_run=abort_run, log_=WatchLog())
    [action] = await _check(watch, T0)
    assert action.kind == "run_aborted" and asked == [stuck]
    loop.cancel(stuck, "Stopped")  # the runner's driver stops
    assert await _check(watch, T0 + 120) == []
    loop.store.close()


async def test_a_task_steps_run_is_left_to_the_task_engine(tmp_path: Path) -> None:
    """Stopping "its chat" would abort the chat's own runs; the engine owns a step's run."""
    loop = make_loop(tmp_path)
    runs = ActiveRuns()
    step = start_run(loop, "tasks", T0 - 3600, task_id="t-1")
    watch = RunWatch(lambda: loop, stuck_after_s=900, stop_chat=runs.stop,
                     abort_run=lambda run_id: False, log_=WatchLog())
    with runs.track("telegram:tasks") as chat_turn:
        assert await _check(watch, T0) == []
        assert not chat_turn.is_set()
    assert loop.store.state(step).status == ev.RUNNING
    loop.store.close()


async def test_with_several_daemons_a_node_watches_only_the_runs_of_its_chats(
        tmp_path: Path) -> None:
    """Shared run journals (Redis): a run of a chat another node holds is that node's to stop
    (it drives it); this node's watchdog neither lists nor cancels it."""
    loop = make_loop(tmp_path)
    runs = ActiveRuns()
    mine = start_run(loop, "mine", T0 - 3600)
    theirs = start_run(loop, "theirs", T0 - 3600)
    watch = RunWatch(lambda: loop, stuck_after_s=900, stop_chat=runs.stop,
                     abort_run=lambda run_id: False, log_=WatchLog(),
                     owns=lambda chat_key: chat_key == "telegram:mine")
    assert [run_id for run_id, _ in await watch.running(T0)] == [mine]
    assert [(a.kind, a.target) for a in await _check(watch, T0)] == [("run_cancelled", mine)]
    assert loop.store.state(theirs).status == ev.RUNNING
    loop.store.close()
